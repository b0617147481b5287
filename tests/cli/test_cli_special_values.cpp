// `bitcheck sweep --special-values`: every op of the default spec on the CPU backend with NaN, Inf,
// subnormals and -0 in its float row inputs: the invariant impls stay invariant and pass accuracy
// (non-finite results matched against the reference) except two listed reference disagreements,
// every control group still drifts, the report records the rate in each case, repro re-runs such
// a case exactly, and a bad rate is bad input.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli/cli_support.h"

using nlohmann::json;

TEST_CASE(
    "sweep --special-values: invariant CPU impls stay invariant and accurate, controls still drift",
    "[cli][special_values]") {
  TempDir dir, plain_dir;
  Run run =
      run_bitcheck(dir, "sweep --special-values --backend cpu --dtype bf16 --no-progress --out " +
                            quote(dir.path()));
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code <= 1);
  json report = json::parse(read_file(dir / "report.json"));
  // The baseline: the same sweep without special values. Every control group that drifts there
  // must drift with special values too (NaN and Inf must not blind the harness).
  REQUIRE(run_bitcheck(plain_dir, "sweep --backend cpu --dtype bf16 --no-progress --out " +
                                      quote(plain_dir.path()))
              .exit_code <= 1);
  json plain = json::parse(read_file(plain_dir / "report.json"));
  const auto drifting_control_groups = [](const json& r) {
    std::set<std::string> groups;
    for (const auto& c : r["results"]) {
      if (c["control"] == true && c["verdict"] == "drift") {
        groups.insert(c["op"].get<std::string>() + "/" + c["impl"].get<std::string>() + "/" +
                      c["pass"].get<std::string>());
      }
    }
    return groups;
  };
  const std::set<std::string> plain_groups = drifting_control_groups(plain);
  const std::set<std::string> special_groups = drifting_control_groups(report);
  CHECK_FALSE(plain_groups.empty());
  for (const auto& group : plain_groups) {
    INFO("control group " << group << " drifts without special values");
    CHECK(special_groups.count(group) == 1);
  }
  // Known disagreements between an FP32 reference and the CPU impl on non-finite inputs, each a
  // finding the special values exposed (the impl is invariant; accuracy says the two differ):
  // - gelu_erf backward at x = +Inf: the reference's x * exp(-x^2 / 2) uses Eigen's exp, which
  //   clamps its argument, so it gives Inf * tiny = Inf (dx = -Inf for dy < 0); the impl's expf
  //   gives 0 and Inf * 0 = NaN. The limit of the derivative is 1 (dx = dy): neither is right.
  // - attention backward: the reference's dq/dk/dv are NaN in rows whose causal window holds no
  //   special value (masked future positions leak NaN through 0 * NaN); the impl's are finite.
  // When one is fixed this list must shrink: an entry that no longer fails is reported below.
  const std::set<std::string> known_inaccurate = {"gelu_erf/backward", "attention/backward"};
  std::set<std::string> ops, inaccurate;
  std::int64_t nonfinite_matched = 0;
  for (const auto& c : report["results"]) {
    INFO(c["id"].get<std::string>());
    CHECK(c["special_values"] == 0.03125);
    CHECK_THAT(c["id"].get<std::string>(), Catch::EndsWith("/special=0.03125"));
    const std::string op = c["op"];
    ops.insert(op);
    if (c["verdict"] == "skipped") continue;
    if (c["control"] == true) continue;
    for (const auto& accuracy : c["accuracy"])
      nonfinite_matched += accuracy["nonfinite_matched"].get<std::int64_t>();
    CHECK(c["drift"].empty());  // invariance holds with NaN, Inf, subnormals and -0
    CHECK(c["nondeterminism"].empty());
    if (c["verdict"] == "inaccurate") {
      const std::string key = op + "/" + c["pass"].get<std::string>();
      inaccurate.insert(key);
      CHECK(known_inaccurate.count(key) == 1);
    } else {
      CHECK(c["verdict"] == "pass");
    }
  }
  CHECK(inaccurate == known_inaccurate);
  json spec = json::parse(read_file(source_dir + "/sweeps/default.json"));
  for (const auto& [name, entry] : spec["ops"].items())
    CHECK(ops.count(entry.value("op", name)) == 1);
  CHECK(nonfinite_matched > 0);  // NaN / Inf reached outputs and were checked against the reference
}

TEST_CASE("repro re-runs a special-values case to the same bits", "[cli][special_values][repro]") {
  TempDir dir;
  REQUIRE(run_bitcheck(
              dir,
              "sweep --op rmsnorm --backend cpu --dtype bf16 --batch 7 --special-values-rate 0.25 "
              "--no-progress --out " +
                  quote(dir.path()))
              .exit_code <= 1);
  json report = json::parse(read_file(dir / "report.json"));
  const json& c = report["results"].at(0);  // rmsnorm/cpu-fixed-order, an invariant impl
  CHECK(c["verdict"] == "pass");
  const std::string id = c["id"], fingerprint = c["fingerprint"];
  CHECK_THAT(id, Catch::EndsWith("/special=0.25"));
  Run repro = run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " + quote(id));
  INFO(repro.out << repro.err);
  CHECK(repro.exit_code == 0);
  CHECK(repro.out.find("fingerprint: " + fingerprint + " (report: " + fingerprint +
                       ") -> same bits") != std::string::npos);
}

TEST_CASE("a special-value rate out of range is bad input", "[cli][special_values][bad-input]") {
  TempDir dir;
  const std::string out = dir / "out";
  Run run = run_bitcheck(
      dir, "sweep --op rmsnorm --backend cpu --special-values-rate 0.9 --no-progress --out " +
               quote(out));
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--special-values-rate"));
  CHECK_THAT(run.err, Catch::Contains("[0, 0.5]"));
  CHECK_FALSE(std::filesystem::exists(out + "/report.json"));
}
