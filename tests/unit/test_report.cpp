// Reports: a few real CPU cases through build_report, dumped and parsed back (schema version,
// meta, results, verdicts, summary, first failing op, status matrix); atomic writes.
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/build_info.h"
#include "manifest.h"
#include "report/report.h"
#include "run/runner.h"
#include "spec/contract.h"
#include "sweep/sweep.h"

using namespace bitcheck;
using nlohmann::json;

namespace {

// rmsnorm without the normalization: invariant and deterministic, but far from the reference.
class UnnormalizedRmsnorm : public Impl {
 public:
  UnnormalizedRmsnorm()
      : Impl(ImplInfo::invariant("test-unnormalized", "cpu", "test-only: y = x * weight")
                 .only_passes({Pass::forward})) {}
  void run(Batch& batch) override {
    const std::int64_t h = batch.spec->dim("H");
    const Tensor& x = batch.in("x");
    const Tensor& weight = batch.in("weight");
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t i = 0; i < h; ++i) y.set(s * h + i, x.get(s * h + i) * weight.get(i));
    }
  }
};

CaseSpec make_case(const std::string& op, const std::string& impl, const std::string& dtype,
                   Pass pass, std::int64_t rows) {
  CaseSpec spec;
  spec.op = op;
  spec.impl = impl;
  spec.dtype_name = dtype;
  spec.dtype = parse_dtype(dtype).value_or(DType::fp32);
  spec.pass = pass;
  spec.dims = op == "matmul" ? Dims{{"N", 8}, {"K", 32}} : Dims{{"H", 32}};
  spec.rows = rows;
  spec.layouts = {"alone", "batch", "shuffled", "pad_right", "pad_left", "ragged", "microbatch"};
  return spec;
}

std::string make_temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "bitcheck-report-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream stream(path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

}  // namespace

TEST_CASE("a report of real CPU cases round-trips through JSON", "[report]") {
  Registry registry;
  register_all(registry);
  registry.add_impl("rmsnorm", std::make_unique<UnnormalizedRmsnorm>());
  Contract contract = load_embedded_contract(registry);
  Runner runner(registry, contract);

  const std::vector<CaseSpec> cases = {
      make_case("matmul", "cpu-fixed-order", "bf16", Pass::forward, 3),
      make_case("matmul", "cpu-fixed-order", "bf16", Pass::backward, 3),
      make_case("matmul", "cpu-split-k-by-rows", "bf16", Pass::forward, 7),
      make_case("rmsnorm", "test-unnormalized", "bf16", Pass::forward, 3),
      make_case("matmul", "cpu-fixed-order", "fp8", Pass::forward, 3),
      make_case("rmsnorm", "cpu-fixed-order", "fp32", Pass::forward, 3),
  };
  const std::vector<std::string> expected_verdicts = {"pass",       "pass",    "drift",
                                                      "inaccurate", "skipped", "pass"};
  std::vector<CaseResult> results;
  for (const auto& spec : cases) results.push_back(runner.run_case(spec));

  RunMeta meta;
  meta.argv = {"bitcheck", "sweep", "--op", "all", "--out", "some dir"};
  meta.spec_source = "embedded:sweeps/default.json";
  meta.contract_source = contract.source;
  meta.started_at = "2025-01-01T00:00:00Z";
  meta.wall_seconds = 1.5;
  const std::string text =
      build_report(meta, environment_meta(registry), results, registry).dump(1);
  const json report = json::parse(text);

  CHECK(report["schema_version"] == report_schema_version);
  CHECK(report["schema_version"] == 1);
  CHECK(report["tool"] == "bitcheck");

  const json& m = report["meta"];
  CHECK(m["argv"] == json(meta.argv));
  CHECK(m["command_line"] == "bitcheck sweep --op all --out some dir");
  CHECK(m["git_revision"] == git_revision());
  CHECK(m["bitcheck_version"] == version_string());
  CHECK(m["compile_flags"] == compile_flags());
  REQUIRE(m["host"].is_string());
  CHECK_FALSE(m["host"].get<std::string>().empty());
  REQUIRE(m["cuda"].is_object());
  CHECK(m["cuda"]["cuda_backend_built"].is_boolean());
  CHECK(m["spec"] == meta.spec_source);
  CHECK(m["contract"] == "embedded:contract/contract.json");
  CHECK(m["started_at"] == meta.started_at);
  CHECK(m["wall_seconds"] == 1.5);
  CHECK(m["interrupted"] == false);

  REQUIRE(report["results"].size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const json& r = report["results"][i];
    INFO(cases[i].id());
    CHECK(r["id"] == cases[i].id());
    CHECK(r["verdict"] == expected_verdicts[i]);
    CHECK(r["op"] == cases[i].op);
    CHECK(r["impl"] == cases[i].impl);
    CHECK(r["dtype"] == cases[i].dtype_name);
    CHECK(r["rows"] == cases[i].rows);
  }
  const json& control = report["results"][2];
  CHECK(control["control"] == true);
  CHECK(control["expected_to_drift"] == true);
  REQUIRE_FALSE(control["drift"].empty());
  const json& finding = control["drift"][0];
  CHECK(finding["tensor"] == "y");
  CHECK(finding["max_abs_diff"].get<double>() > 0);
  CHECK(finding["max_rel_diff"].get<double>() > 0);
  CHECK(finding["first_mismatch"]["expected_bits"].get<std::string>().size() == 6);  // "0x" + bf16
  CHECK(finding["first_mismatch"]["expected_bits"] != finding["first_mismatch"]["actual_bits"]);

  const json& inaccurate = report["results"][3];
  CHECK(inaccurate["accuracy"][0]["passed"] == false);
  CHECK(inaccurate["accuracy"][0]["violations"].get<std::int64_t>() > 0);
  CHECK(inaccurate["accuracy"][0].contains("worst"));

  const json& skipped = report["results"][4];
  CHECK_THAT(skipped["reason"].get<std::string>(), Catch::Contains("out of scope"));
  CHECK_FALSE(skipped.contains("drift"));
  CHECK_FALSE(skipped.contains("fingerprint"));
  CHECK(report["results"][0]["fingerprint"].get<std::string>().size() == 16);

  const json& summary = report["summary"];
  CHECK(summary["cases"] == 6);
  CHECK(summary["verdicts"]["pass"] == 3);
  CHECK(summary["verdicts"]["inaccurate"] == 1);
  CHECK(summary["verdicts"]["skipped"] == 1);
  CHECK_FALSE(summary["verdicts"].contains("drift"));  // the control is counted apart
  CHECK(summary["first_failing_op"] == "rmsnorm");
  CHECK(summary["first_failing_case"] == cases[3].id());
  CHECK(report["first_failing_op"] == "rmsnorm");
  CHECK(summary["exit_code"] == 1);
  CHECK(summary["harness_failures"].empty());
  REQUIRE(summary["controls"].size() == 1);
  CHECK(summary["controls"][0]["impl"] == "cpu-split-k-by-rows");
  CHECK(summary["controls"][0]["drifted"] == 1);
  CHECK(summary["controls"][0]["lost_sight"] == false);

  const json& matrix = report["status_matrix"];
  CHECK(matrix["ops"] == json({"matmul", "rmsnorm"}));
  CHECK(matrix["dtypes"] == json({"bf16", "fp32", "fp8"}));
  const json& cells = matrix["cells"];
  CHECK(cells["matmul"]["bf16"]["forward"]["status"] == "pass");
  CHECK(cells["matmul"]["bf16"]["forward"]["counts"] == json({{"pass", 1}}));  // no control in it
  CHECK(cells["matmul"]["bf16"]["backward"]["status"] == "pass");
  CHECK(cells["matmul"]["fp8"]["forward"]["status"] == "skipped");
  CHECK(cells["rmsnorm"]["bf16"]["forward"]["status"] == "inaccurate");
  CHECK(cells["rmsnorm"]["fp32"]["forward"]["status"] == "pass");
  CHECK_FALSE(cells["rmsnorm"]["bf16"].contains("backward"));

  std::string terminal = render_terminal_summary(report, registry);
  CHECK_THAT(terminal, Catch::Contains("first failing op: rmsnorm"));
  CHECK_THAT(terminal, Catch::Contains("controls: 1/1"));
}

TEST_CASE("the status matrix shows the most severe verdict of a cell", "[report]") {
  auto result = [](const std::string& op, Verdict verdict) {
    CaseResult r;
    r.spec.op = op;
    r.spec.impl = "cpu-fixed-order";
    r.spec.dtype_name = "bf16";
    r.verdict = verdict;
    return r;
  };
  StatusMatrix matrix = build_matrix(
      {result("b", Verdict::pass), result("b", Verdict::drift), result("b", Verdict::inaccurate),
       result("a", Verdict::skipped), result("a", Verdict::pass)},
      {"a", "b"});
  CHECK(matrix.ops == std::vector<std::string>{"a", "b"});
  CHECK(matrix.cells["b"]["bf16"]["forward"].status == "drift");
  CHECK(matrix.cells["b"]["bf16"]["forward"].counts["drift"] == 1);
  CHECK(matrix.cells["b"]["bf16"]["forward"].counts["pass"] == 1);
  CHECK(matrix.cells["a"]["bf16"]["forward"].status == "pass");
  Summary summary = summarize(
      {result("a", Verdict::pass), result("b", Verdict::drift), result("a", Verdict::inaccurate)},
      {"a", "b"});
  REQUIRE(summary.first_failing_op.has_value());
  CHECK(*summary.first_failing_op == "a");  // op order, not result order
  CHECK(summary.exit_code == 1);
}

TEST_CASE("non-finite drift magnitudes still give valid JSON", "[report]") {
  CaseResult result;
  result.spec.op = "matmul";
  result.spec.impl = "cpu-fixed-order";
  result.spec.dtype_name = "bf16";
  result.verdict = Verdict::drift;
  DriftMetrics metrics;
  metrics.layout = "pad_right";
  metrics.reference_layout = "alone";
  metrics.tensor = "y";
  metrics.dtype = DType::bf16;
  metrics.mismatch_count = 1;
  metrics.max_abs_diff = std::numeric_limits<double>::infinity();
  metrics.max_rel_diff = std::numeric_limits<double>::infinity();
  metrics.max_ulp_distance = std::numeric_limits<std::uint64_t>::max();
  metrics.first_mismatch = Mismatch{0, 0, 1.0f, std::nanf(""), 0x3f80, 0x7fc0};
  result.drift.push_back(metrics);
  Registry registry;
  register_all(registry);
  const std::string text = build_report(RunMeta{}, json::object(), {result}, registry).dump();
  json parsed = json::parse(text);
  const json& drift = parsed["results"][0]["drift"][0];
  CHECK(drift["max_abs_diff"] == "inf");
  CHECK(drift["first_mismatch"]["actual_bits"] == "0x7fc0");
  CHECK(parsed["summary"]["exit_code"] == 1);
}

TEST_CASE("write_file_atomically replaces the target and leaves no temporary file", "[report]") {
  const std::string dir = make_temp_dir();
  const std::string path = dir + "/report.json";
  write_file_atomically(path, "{\"first\": 1}\n");
  CHECK(read_file(path) == "{\"first\": 1}\n");
  write_file_atomically(path, "{\"second\": 2}\n");
  CHECK(read_file(path) == "{\"second\": 2}\n");
  CHECK(directory_entries(dir) == std::vector<std::string>{"report.json"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("write_file_atomically into an unwritable place throws and creates nothing", "[report]") {
  const std::string dir = make_temp_dir();
  // A regular file where a directory should be: not writable even for root.
  std::ofstream(dir + "/not-a-directory") << "x";
  const std::string path = dir + "/not-a-directory/report.json";
  CHECK_THROWS(write_file_atomically(path, "{}"));
  CHECK(directory_entries(dir) == std::vector<std::string>{"not-a-directory"});
  CHECK_THROWS(write_file_atomically(dir + "/missing/report.json", "{}"));
  CHECK_FALSE(std::filesystem::exists(dir + "/missing"));
  CHECK(directory_entries(dir) == std::vector<std::string>{"not-a-directory"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("merging shard reports keeps every shard's cases, in case order, and counts them all",
          "[report]") {
  auto shard = [](std::vector<std::pair<std::string, std::int64_t>> cases, const char* verdict) {
    json report = {{"schema_version", report_schema_version},
                   {"meta", {{"command_line", "sweep"}, {"wall_seconds", 1.0}}},
                   {"results", json::array()}};
    for (const auto& [id, index] : cases) {
      report["results"].push_back({{"id", id},
                                   {"op", "matmul"},
                                   {"impl", "cpu-fixed-order"},
                                   {"dtype", "bf16"},
                                   {"pass", "forward"},
                                   {"verdict", verdict},
                                   {"case_index", index}});
    }
    return report;
  };
  const json merged =
      merge_reports({shard({{"a", 0}, {"c", 2}}, "pass"), shard({{"b", 1}}, "drift")},
                    {"shard-0.json", "shard-1.json"}, {"matmul"});
  std::vector<std::string> ids;
  for (const auto& c : merged["results"]) ids.push_back(c["id"]);
  CHECK(ids == std::vector<std::string>{"a", "b", "c"});
  CHECK(merged["summary"]["cases"] == 3);
  CHECK(merged["summary"]["verdicts"]["drift"] == 1);
  CHECK(merged["meta"]["shards"].size() == 2);
}
