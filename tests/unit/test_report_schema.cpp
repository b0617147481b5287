// docs/report.schema.json: reports the library builds (run, skipped, control, non-finite
// magnitudes, merged) validate; a wrong verdict, a missing, mistyped or unknown field does not;
// and the test validator refuses keywords it does not implement and fails on each one it does.
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "manifest.h"
#include "report/report.h"
#include "run/runner.h"
#include "schema/json_schema.h"
#include "spec/contract.h"
#include "sweep/sweep.h"

using namespace bitcheck;
using nlohmann::json;
using schema_check::JsonSchema;

namespace {

json load_schema_document() {
  std::ifstream stream(std::string(BITCHECK_SOURCE_DIR) + "/docs/report.schema.json");
  REQUIRE(stream);
  return json::parse(stream);
}

const JsonSchema& report_schema() {
  static const JsonSchema schema(load_schema_document());
  return schema;
}

std::string listed(const std::vector<std::string>& errors) {
  std::string text;
  for (const auto& error : errors) text += "\n  " + error;
  return text;
}

CaseSpec matmul_case(const std::string& impl, const std::string& dtype, std::int64_t rows) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype_name = dtype;
  spec.dtype = parse_dtype(dtype).value_or(DType::fp32);
  spec.pass = Pass::backward;
  spec.dims = {{"N", 8}, {"K", 32}};
  spec.rows = rows;
  spec.layouts = {"alone", "batch", "pad_right", "microbatch"};
  return spec;
}

// A report of real CPU cases: an invariant impl that passes, a control that drifts, a case skipped
// for its dtype, and a hand-made drift finding with non-finite magnitudes and NaN values.
json sample_report() {
  Registry registry;
  register_all(registry);
  Contract contract = load_embedded_contract(registry);
  Runner runner(registry, contract);
  std::vector<CaseResult> results;
  results.push_back(runner.run_case(matmul_case("cpu-fixed-order", "bf16", 7)));
  results.push_back(runner.run_case(matmul_case("cpu-split-k-by-rows", "bf16", 7)));
  results.push_back(runner.run_case(matmul_case("cpu-fixed-order", "fp8", 7)));
  REQUIRE(results[0].verdict == Verdict::pass);
  REQUIRE(results[1].verdict == Verdict::drift);
  REQUIRE(results[2].verdict == Verdict::skipped);
  CaseResult extreme = results[1];
  extreme.spec.seed = 2;
  DriftMetrics& finding = extreme.drift.front();
  finding.max_abs_diff = std::numeric_limits<double>::infinity();
  finding.max_rel_diff = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(finding.first_mismatch);
  finding.first_mismatch->expected = std::numeric_limits<float>::quiet_NaN();
  extreme.impl_config = {{"path", "test"}};
  KernelLaunch gemm;
  gemm.name = "gemm_tile128x64";
  gemm.grid = {16, 2, 1};
  gemm.block = {128, 1, 1};
  gemm.shared_bytes = 49152;
  extreme.kernels["alone"] = {{gemm, 7}};
  gemm.dynamic_shared_bytes = 49152;
  extreme.kernels["batch"] = {{gemm, 1}};
  results.push_back(extreme);
  CaseResult failed = results[0];
  failed.spec.seed = 3;
  failed.verdict = Verdict::error;
  failed.reason = "the impl threw";
  failed.fingerprint.clear();
  results.push_back(failed);

  RunMeta meta;
  meta.argv = {"bitcheck", "sweep"};
  meta.spec_source = "test";
  meta.contract_source = contract.source;
  meta.started_at = utc_timestamp();
  return build_report(meta, environment_meta(registry), results, registry);
}

const json& sample() {
  static const json report = sample_report();
  return report;
}

bool invalid(const json& report) {
  return !report_schema().validate(report).empty();
}

}  // namespace

TEST_CASE("the schema's version is the report's", "[report][schema]") {
  json schema = load_schema_document();
  CHECK(schema["properties"]["schema_version"]["const"] == report_schema_version);
  CHECK(sample()["schema_version"] == report_schema_version);
}

TEST_CASE("reports the library builds validate against the schema", "[report][schema]") {
  auto errors = report_schema().validate(sample());
  INFO(listed(errors));
  CHECK(errors.empty());
  const std::vector<std::string> op_order = {"matmul"};
  json merged = merge_reports({sample()}, {"shard-0.json"}, op_order);
  merged["meta"]["devices"] = {"0"};
  errors = report_schema().validate(merged);
  INFO(listed(errors));
  CHECK(errors.empty());
}

TEST_CASE("a report with a wrong, missing, mistyped or unknown field fails validation",
          "[report][schema]") {
  REQUIRE_FALSE(invalid(sample()));
  struct Mutation {
    const char* what;
    std::function<void(json&)> apply;
    const char* path;  // where the validator must point
  };
  const std::vector<Mutation> mutations = {
      {"unknown verdict", [](json& r) { r["results"][0]["verdict"] = "drifted"; }, "$.results[0]"},
      {"missing verdict", [](json& r) { r["results"][0].erase("verdict"); }, "$.results[0]"},
      {"missing summary", [](json& r) { r.erase("summary"); }, "$.summary: missing"},
      {"mistyped rows", [](json& r) { r["results"][1]["rows"] = "7"; }, "$.results[1]"},
      {"unknown field in a result", [](json& r) { r["results"][0]["verdikt"] = "pass"; },
       "$.results[0]"},
      {"skipped without a reason", [](json& r) { r["results"][2].erase("reason"); },
       "$.results[2]"},
      {"drift metric missing its tensor",
       [](json& r) { r["results"][1]["drift"][0].erase("tensor"); }, "$.results[1]"},
      {"bad hex bits",
       [](json& r) { r["results"][1]["drift"][0]["first_mismatch"]["actual_bits"] = "12"; },
       "$.results[1]"},
      {"negative mismatch count",
       [](json& r) { r["results"][1]["drift"][0]["mismatch_count"] = -1; }, "$.results[1]"},
      {"bad verdict key in the summary", [](json& r) { r["summary"]["verdicts"]["passed"] = 1; },
       "$.summary.verdicts.passed"},
      {"exit code 2 in a report", [](json& r) { r["summary"]["exit_code"] = 2; },
       "$.summary.exit_code"},
      {"bad matrix status",
       [](json& r) { r["status_matrix"]["cells"]["matmul"]["bf16"]["backward"]["status"] = "ok"; },
       "$.status_matrix.cells.matmul.bf16.backward.status"},
      {"unknown pass in the matrix",
       [](json& r) { r["status_matrix"]["cells"]["matmul"]["bf16"]["sideways"] = json::object(); },
       "$.status_matrix.cells.matmul.bf16.sideways"},
      {"interrupted as a string", [](json& r) { r["meta"]["interrupted"] = "no"; },
       "$.meta.interrupted"},
      {"missing meta field", [](json& r) { r["meta"].erase("git_revision"); },
       "$.meta.git_revision"},
      {"other schema version", [](json& r) { r["schema_version"] = 2; }, "$.schema_version"},
      {"short fingerprint", [](json& r) { r["results"][0]["fingerprint"] = "abc"; },
       "$.results[0]"},
  };
  for (const auto& mutation : mutations) {
    json report = sample();
    mutation.apply(report);
    auto errors = report_schema().validate(report);
    INFO(mutation.what << listed(errors));
    REQUIRE_FALSE(errors.empty());
    CHECK_THAT(errors.front(), Catch::StartsWith(mutation.path));
  }
}

TEST_CASE("the validator refuses keywords it does not implement", "[report][schema]") {
  for (const char* schema :
       {R"({"type": "string", "maxLength": 3})",
        R"({"properties": {"a": {"if": {"type": "string"}}}})",
        R"({"$defs": {"unused": {"format": "date-time"}}})", R"({"items": [{"type": "string"}]})",
        R"({"$ref": "other.json#/x"})", R"({"type": "decimal"})"}) {
    INFO(schema);
    CHECK_THROWS_AS(JsonSchema(json::parse(schema)), std::invalid_argument);
  }
  CHECK_NOTHROW(JsonSchema(load_schema_document()));
}

TEST_CASE("each keyword of the validator accepts a match and rejects a mismatch",
          "[report][schema]") {
  struct Probe {
    const char* schema;
    const char* good;
    const char* bad;
  };
  const std::vector<Probe> probes = {
      {R"({"type": "integer"})", "3", "3.5"},
      {R"({"type": ["string", "null"]})", "null", "1"},
      {R"({"required": ["a"]})", R"({"a": 1})", R"({"b": 1})"},
      {R"({"properties": {"a": {"type": "string"}}})", R"({"a": "x"})", R"({"a": 1})"},
      {R"({"additionalProperties": false, "properties": {"a": {}}})", R"({"a": 1})",
       R"({"a": 1, "b": 2})"},
      {R"({"additionalProperties": {"type": "integer"}})", R"({"x": 1})", R"({"x": "1"})"},
      {R"({"items": {"type": "boolean"}})", "[true, false]", "[true, 0]"},
      {R"({"enum": ["pass", "drift"]})", R"("drift")", R"("drifted")"},
      {R"({"const": 1})", "1", "2"},
      {R"({"minimum": 0})", "0", "-1"},
      {R"({"pattern": "^[0-9a-f]{4}$"})", R"("00ff")", R"("00fg")"},
      {R"({"anyOf": [{"type": "string"}, {"minimum": 5}]})", "7", "3"},
      {R"({"oneOf": [{"type": "integer"}, {"minimum": 5}]})", "3", "7"},
      {R"({"$defs": {"n": {"type": "number"}}, "$ref": "#/$defs/n"})", "1.5", R"("1.5")"},
  };
  for (const auto& probe : probes) {
    JsonSchema schema(json::parse(probe.schema));
    INFO(probe.schema << " good " << probe.good << " bad " << probe.bad);
    CHECK(schema.validate(json::parse(probe.good)).empty());
    CHECK_FALSE(schema.validate(json::parse(probe.bad)).empty());
  }
}
