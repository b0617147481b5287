// Launch paths through the binary: every case reports the paths each layout ran, `bitcheck
// coverage` finds the switch points crossed with the bits intact (and the control's crossings
// that drifted), `sweep --require-coverage` fails on a declared path that never ran, and specs
// pick batches from the impls' switch points.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {
const json* path_entry(const json& coverage, const std::string& impl, const std::string& path) {
  for (const auto& entry : coverage["impls"]) {
    if (entry["op"].get<std::string>() + "/" + entry["impl"].get<std::string>() != impl) continue;
    for (const auto& p : entry["paths"])
      if (p["name"] == path) return &p;
  }
  return nullptr;
}
}  // namespace

TEST_CASE("cases record the paths per layout and coverage finds the crossings", "[cli][paths]") {
  TempDir dir;
  // H = 13: alone (13 elements) runs the body and the tail; M = 8 (104 elements) the body only.
  Run sweep = run_bitcheck(dir,
                           "sweep --op silu --backend cpu --dtype bf16 --pass forward --batch 1,8 "
                           "--no-progress --out " +
                               quote(dir.path()));
  REQUIRE(sweep.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  REQUIRE(report["paths_declared"].contains("silu/cpu-fixed-order"));
  bool found = false;
  for (const auto& c : report["results"]) {
    if (c["impl"] != "cpu-fixed-order" || c["rows"] != 8 || c["dims"]["H"] != 13) continue;
    found = true;
    CHECK(c["paths"]["alone"] == json::array({"body.vector", "tail.scalar"}));
    CHECK(c["paths"]["batch"] == json::array({"body.vector"}));
  }
  CHECK(found);

  Run coverage = run_bitcheck(dir, "coverage --all --json " + quote(dir / "report.json"));
  REQUIRE(coverage.exit_code == 0);
  json table = json::parse(coverage.out);
  const json* tail = path_entry(table, "silu/cpu-fixed-order", "tail.scalar");
  REQUIRE(tail != nullptr);
  CHECK((*tail)["cases_ran"].get<int>() > 0);
  CHECK((*tail)["cases_crossed"].get<int>() > 0);  // the bits held across the switch
  CHECK((*tail)["crossings_drifted"] == 0);
  // The control's tail evaluates differently: at H = 1003 alone is all tail (2048-element
  // granules) and M = 8 has a body, so the batch crossed to the body and the bits moved.
  const json* control_body = path_entry(table, "silu/cpu-tail-approx", "body.vector");
  REQUIRE(control_body != nullptr);
  CHECK((*control_body)["crossings_drifted"].get<int>() > 0);
  CHECK(table["gaps"].empty());

  // The report carries the table; the nightly page shows it.
  REQUIRE(report.contains("coverage"));
  CHECK(report["coverage"]["gaps"].empty());
  CHECK(report["coverage"]["paths"]["silu/cpu-fixed-order"]["tail.scalar"][1].get<int>() > 0);
  Run page = run_bitcheck(dir, "matrix --format html --out " + quote(dir / "index.html") + " " +
                                   quote(dir / "report.json"));
  REQUIRE(page.exit_code == 0);
  const std::string html = read_file(dir / "index.html");
  CHECK_THAT(html, Catch::Contains("id=\"coverage-table\""));
  CHECK_THAT(html, Catch::Contains("Every declared path of the invariant impls ran"));
  CHECK_THAT(html, Catch::Contains("<td>tail.scalar</td>"));

  Run text = run_bitcheck(dir, "coverage " + quote(dir / "report.json"));
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("silu/cpu-fixed-order"));
  CHECK_THAT(text.out, Catch::Contains("tail.scalar"));
  CHECK_THAT(text.out, Catch::Contains("0 gap(s)"));
  CHECK_THAT(text.out, !Catch::Contains("cpu-tail-approx"));  // controls only with --all
}

TEST_CASE("sweep --require-coverage fails when a declared path never ran", "[cli][paths]") {
  TempDir dir;
  // scale's dscale path runs only in the backward.
  const std::string sweep =
      "sweep --op scale --backend cpu --dtype bf16 --batch 1,8 "
      "--require-coverage --no-progress --out " +
      quote(dir.path());
  Run forward_only = run_bitcheck(dir, sweep + " --pass forward");
  CHECK(forward_only.exit_code == 1);
  CHECK_THAT(forward_only.out,
             Catch::Contains("scale/cpu-fixed-order: path columns.token-sequential never ran"));
  Run coverage = run_bitcheck(dir, "coverage --require " + quote(dir / "report.json"));
  CHECK(coverage.exit_code == 1);
  Run page = run_bitcheck(dir, "matrix --format html --out " + quote(dir / "index.html") + " " +
                                   quote(dir / "report.json"));
  REQUIRE(page.exit_code == 0);
  CHECK_THAT(read_file(dir / "index.html"),
             Catch::Contains("scale/cpu-fixed-order: path columns.token-sequential never ran"));
  CHECK_THAT(coverage.out, Catch::Contains("gap: scale/cpu-fixed-order"));

  Run both = run_bitcheck(dir, sweep);
  CHECK(both.exit_code == 0);
  CHECK_THAT(both.out, Catch::Contains("every declared path of the invariant impls ran"));
}

TEST_CASE("coverage of a report without paths names the field", "[cli][paths]") {
  TempDir dir;
  std::ofstream(dir / "old.json") << R"({"results": []})";
  Run run = run_bitcheck(dir, "coverage " + quote(dir / "old.json"));
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("paths_declared"));
}

TEST_CASE("a spec's batches from the switch points", "[cli][paths][spec]") {
  TempDir dir;
  Run sweep = run_bitcheck(dir, "sweep --spec " + quote(data_dir + "spec_switch_points.json") +
                                    " --backend cpu --no-progress --out " + quote(dir.path()));
  REQUIRE(sweep.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  std::map<std::string, std::set<std::int64_t>> batches;
  for (const auto& c : report["results"])
    batches[c["op"].get<std::string>()].insert(c["rows"].get<std::int64_t>());
  // silu at H = 13: the tail vanishes where M * 13 % 8 == 0 (M = 8, 16, ...) and returns at the
  // next M; the budget keeps 6 values, 1 included, each switch point with its left side.
  CHECK(batches["silu"].size() == 6);
  CHECK(batches["silu"].count(1) == 1);
  CHECK(batches["silu"].count(7) == 1);
  CHECK(batches["silu"].count(8) == 1);
  for (std::int64_t rows : batches["silu"]) CHECK(rows <= 64);
  // Numbers and switch points together.
  CHECK(batches["scale"].count(33) == 1);
  CHECK(batches["scale"].count(8) == 1);
  CHECK(batches["scale"].size() == 5);
  // The layouts crossed the switch: some case's alone and batch layouts ran different paths.
  bool crossed = false;
  for (const auto& c : report["results"])
    if (c.contains("paths") && c["paths"]["alone"] != c["paths"]["batch"]) crossed = true;
  CHECK(crossed);
}

TEST_CASE("bad switch-point and forced-path fields are refused", "[cli][paths][spec]") {
  TempDir dir;
  Run bad = run_bitcheck(dir, "sweep --spec " + quote(data_dir + "spec_bad_switch_points.json") +
                                  " --backend cpu --no-progress --out " + quote(dir.path()));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("spec_bad_switch_points.json"));
  CHECK_THAT(bad.err, Catch::Contains("$.ops.silu.batches"));
  CHECK_THAT(bad.err, Catch::Contains("switch-points"));
  Run forced = run_bitcheck(dir, "sweep --spec " + quote(data_dir + "spec_bad_force_path.json") +
                                     " --backend cpu --no-progress --out " + quote(dir.path()));
  CHECK(forced.exit_code == 2);
  CHECK_THAT(forced.err, Catch::Contains("$.ops.matmul.force_paths[0]"));
  CHECK_THAT(forced.err, Catch::Contains("tile.X-as-A.1x1"));
}

TEST_CASE("list --paths shows each impl's declared paths", "[cli][paths]") {
  TempDir dir;
  Run list = run_bitcheck(dir, "list --paths");
  REQUIRE(list.exit_code == 0);
  CHECK_THAT(list.out, Catch::Contains("path body.vector"));
  CHECK_THAT(list.out, Catch::Contains("path columns.token-sequential"));
  Run json_list = run_bitcheck(dir, "list --json");
  REQUIRE(json_list.exit_code == 0);
  json j = json::parse(json_list.out);
  CHECK(j["ops"][0]["impls"][0]["paths"].size() >= 1);
}

namespace {
const std::string split_control = "cpu-split-row-small-batch";

// A plain CPU sweep of rmsnorm (bf16 forward, H = 256) with the given "batches": it passes with
// no harness failure; its report.
json sweep_rmsnorm(const TempDir& dir, const std::string& batches, std::string* out) {
  const std::string spec = dir / "rmsnorm.json";
  std::ofstream(spec) << R"({"schema_version": 1, "defaults": {"dtypes": ["bf16"], "passes": )"
                      << R"(["forward"]}, "ops": {"rmsnorm": {"shapes": [{"H": 256}], )"
                      << R"("batches": )" << batches << "}}}";
  Run sweep = run_bitcheck(dir, "sweep --spec " + quote(spec) +
                                    " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(sweep.out << sweep.err);
  CHECK(sweep.exit_code == 0);
  CHECK_THAT(sweep.out, !Catch::Contains("HARNESS FAILURE"));
  *out = sweep.out;
  json report = json::parse(read_file(dir / "out/report.json"));
  CHECK(report["summary"]["harness_failures"].empty());
  return report;
}
}  // namespace

TEST_CASE("switch-point batches reach both sides of a CPU control's switch, which drifts",
          "[cli][paths][spec]") {
  TempDir dir;
  std::string out;
  const json report = sweep_rmsnorm(dir, "\"switch-points\"", &out);
  // The control splits a row below 4 rows: batches 3 and 4 stand on either side of it.
  std::map<std::int64_t, std::string> control_verdicts;
  for (const auto& c : report["results"])
    if (c["impl"] == split_control) control_verdicts[c["rows"]] = c["verdict"];
  CHECK(control_verdicts[3] == "pass");
  CHECK(control_verdicts[4] == "drift");
  CHECK(report["summary"]["controls_without_chance"].empty());
}

TEST_CASE("a control whose switch no batch reaches had no chance to drift: said, not a failure",
          "[cli][paths][spec]") {
  TempDir dir;
  std::string out;
  const json report = sweep_rmsnorm(dir, "[1, 2, 3]", &out);
  CHECK_THAT(out, Catch::Contains("NO CHANCE: control rmsnorm/" + split_control +
                                  " bf16 forward had no chance to drift: its batches go up to 3 "
                                  "rows and its path switches at 4 (add batch 4"));
  bool listed = false;
  for (const auto& group : report["summary"]["controls"]) {
    if (group["impl"] != split_control) continue;
    listed = true;
    CHECK(group["lost_sight"] == false);
    CHECK(group["no_chance_needs_rows"] == 4);
  }
  CHECK(listed);
  for (const auto& c : report["results"])
    if (c["impl"] == split_control) CHECK(c["drift_needs_rows"] == 4);
}
