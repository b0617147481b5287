// The case pipeline's typed steps: each check (invariance, determinism, accuracy) returns its
// typed result and is proven able to fail; the verdict and the exit code follow from them; and a
// CaseResult survives its JSON round trip unchanged.
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "case_support.h"
#include "report/case_json.h"
#include "report/summary.h"
#include "run/case_checks.h"

using namespace bitcheck;
using case_support::from_values;

namespace {

const std::vector<TensorDecl> row_output_decls = {
    {"y", TensorRole::row_output, DType::bf16, {4}, Generator::uniform, 1.0f, 0}};

// Three logical rows of `y`, every one present.
LayoutOutputs three_rows(const std::vector<float>& values) {
  LayoutOutputs outputs;
  outputs.rows.emplace("y", from_values(DType::bf16, 3, values));
  outputs.present.assign(3, true);
  return outputs;
}

const std::vector<float> row_values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

LayoutOutputs with_lowest_bit_flipped(LayoutOutputs outputs, std::int64_t index) {
  Tensor& y = outputs.rows.at("y");
  y.set_bits(index, y.bits(index) ^ 1u);
  return outputs;
}

}  // namespace

TEST_CASE("invariance: a layout with the canonical bits passes, one differing bit drifts",
          "[pipeline][invariance]") {
  const LayoutOutputs alone = three_rows(row_values);
  const CanonicalOutputs canonical{canonical_layout, &alone, nullptr};

  LayoutOutputs padded = three_rows(row_values);
  InvarianceResult same = check_invariance(row_output_decls, "pad_right", false, padded, canonical);
  CHECK(same.passed());
  CHECK(same.comparisons == 1);

  LayoutOutputs flipped = with_lowest_bit_flipped(three_rows(row_values), 6);
  InvarianceResult drifted =
      check_invariance(row_output_decls, "pad_right", false, flipped, canonical);
  CHECK_FALSE(drifted.passed());
  CHECK(drifted.comparisons == 1);
  REQUIRE(drifted.drift.size() == 1);
  const DriftMetrics& finding = drifted.drift.front();
  CHECK(finding.layout == "pad_right");
  CHECK(finding.reference_layout == canonical_layout);
  CHECK(finding.tensor == "y");
  CHECK(finding.mismatch_count == 1);
  REQUIRE(finding.first_mismatch);
  CHECK(finding.first_mismatch->row == 1);
  CHECK(finding.first_mismatch->column == 2);
  CHECK(finding.max_ulp_distance == 1);

  // The canonical layout is never compared with itself.
  LayoutOutputs canonical_flipped = with_lowest_bit_flipped(three_rows(row_values), 0);
  CHECK(check_invariance(row_output_decls, canonical_layout, false, canonical_flipped, canonical)
            .comparisons == 0);
}

TEST_CASE("invariance: one row past the alone sample that differs from the batch is found",
          "[pipeline][invariance]") {
  // 70 rows, more than the default 64 computed alone: rows 0, 69 and a few others ran alone, the
  // rest are compared against the batch layout in every other layout.
  constexpr std::int64_t rows = 70, width = 4, past_sample = 40;
  std::vector<float> values(static_cast<std::size_t>(rows * width));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + static_cast<float>(i) / 8;
  LayoutOutputs batch;
  batch.rows.emplace("y", from_values(DType::bf16, rows, values));
  batch.present.assign(static_cast<std::size_t>(rows), true);
  LayoutOutputs alone = batch;
  alone.present.assign(static_cast<std::size_t>(rows), false);
  for (std::int64_t row : {0, 7, 69}) alone.present[static_cast<std::size_t>(row)] = true;
  const CanonicalOutputs canonical{canonical_layout, &alone, &batch};

  LayoutOutputs padded = batch;
  CHECK(check_invariance(row_output_decls, "pad_right", false, padded, canonical).passed());
  Tensor& y = padded.rows.at("y");
  y.set_bits(past_sample * width + 3, y.bits(past_sample * width + 3) ^ 1u);
  const InvarianceResult drifted =
      check_invariance(row_output_decls, "pad_right", false, padded, canonical);
  REQUIRE(drifted.drift.size() == 1);
  const DriftMetrics& finding = drifted.drift.front();
  CHECK(finding.reference_layout == canonical_reduction_layout);
  CHECK(finding.mismatch_count == 1);
  CHECK(finding.rows_differing == 1);
  REQUIRE(finding.first_mismatch);
  CHECK(finding.first_mismatch->row == past_sample);
  CHECK(finding.first_mismatch->column == 3);
  // Against alone the 3 sampled rows, against the batch the other 67: every row, once.
  CHECK(drifted.comparisons == 2);
  CHECK(finding.compared == (rows - 3) * width);
}

TEST_CASE("invariance: token reductions are compared only in layouts holding every token in order",
          "[pipeline][invariance]") {
  const std::vector<TensorDecl> decls = {
      {"dw", TensorRole::reduction_output, DType::fp32, {2, 2}, Generator::uniform, 1.0f, 0}};
  LayoutOutputs batch;
  batch.reductions.emplace("dw", from_values(DType::fp32, 2, {1, 2, 3, 4}));
  LayoutOutputs split;
  split.reductions.emplace("dw", from_values(DType::fp32, 2, {1, 2, 3, 4.5f}));
  const CanonicalOutputs canonical{canonical_layout, nullptr, &batch};

  InvarianceResult in_order = check_invariance(decls, "micro_batches", true, split, canonical);
  REQUIRE(in_order.drift.size() == 1);
  CHECK(in_order.drift.front().tensor == "dw");
  CHECK(in_order.drift.front().reference_layout == canonical_reduction_layout);
  CHECK(check_invariance(decls, "shuffled", false, split, canonical).comparisons == 0);
}

TEST_CASE("determinism: a repeat with the first run's bits passes, a differing one is found",
          "[pipeline][determinism]") {
  LayoutOutputs first = three_rows(row_values);
  LayoutOutputs again = three_rows(row_values);
  CHECK(check_determinism(row_output_decls, "alone", 1, first, again).passed());

  LayoutOutputs flipped = with_lowest_bit_flipped(three_rows(row_values), 11);
  DeterminismResult flaky = check_determinism(row_output_decls, "alone", 1, first, flipped);
  CHECK_FALSE(flaky.passed());
  REQUIRE(flaky.nondeterminism.size() == 1);
  CHECK(flaky.nondeterminism.front().layout == "alone repeat 2");
  CHECK(flaky.nondeterminism.front().reference_layout == "alone");
  CHECK(flaky.nondeterminism.front().mismatch_count == 1);
}

TEST_CASE("accuracy: outputs within the threshold pass, 3% off fails", "[pipeline][accuracy]") {
  std::map<std::string, Tensor> reference;
  reference.emplace("y", from_values(DType::fp32, 3, row_values));
  const ReferenceRequest request{{0, 1, 2}, {}, {}};
  const Threshold threshold{1e-3, 1e-2, "test", {}};
  auto accuracy_of = [&](const LayoutOutputs& outputs) {
    AccuracyInputs inputs;
    inputs.row_outputs = &outputs;
    inputs.reference = &reference;
    inputs.request = &request;
    inputs.threshold_of = [&](const std::string&) -> const Threshold& { return threshold; };
    return check_outputs_accuracy("test-op", row_output_decls, inputs);
  };

  AccuracyResult close = accuracy_of(three_rows(row_values));
  CHECK(close.passed());
  REQUIRE(close.tensors.size() == 1);
  CHECK(close.tensors.front().compared == 12);

  std::vector<float> off = row_values;
  for (float& value : off) value *= 1.03f;
  AccuracyResult inaccurate = accuracy_of(three_rows(off));
  CHECK_FALSE(inaccurate.passed());
  REQUIRE(inaccurate.tensors.size() == 1);
  CHECK(inaccurate.tensors.front().violations > 0);
  CHECK(inaccurate.tensors.front().atol == 1e-3);

  std::map<std::string, Tensor> empty;
  AccuracyInputs missing;
  const LayoutOutputs outputs = three_rows(row_values);
  missing.row_outputs = &outputs;
  missing.reference = &empty;
  missing.request = &request;
  missing.threshold_of = [&](const std::string&) -> const Threshold& { return threshold; };
  CHECK_THROWS_WITH(check_outputs_accuracy("test-op", row_output_decls, missing),
                    "reference of test-op did not produce y");
}

TEST_CASE("the verdict: nondeterministic before drift before inaccurate", "[pipeline]") {
  InvarianceResult invariant, drifting;
  drifting.drift.push_back(DriftMetrics{});
  DeterminismResult deterministic, flaky;
  flaky.nondeterminism.push_back(DriftMetrics{});
  AccuracyResult accurate, inaccurate;
  inaccurate.tensors.push_back(AccuracyMetrics{});
  inaccurate.tensors.back().violations = 1;

  CHECK(verdict_of(invariant, deterministic, accurate) == Verdict::pass);
  CHECK(verdict_of(invariant, deterministic, inaccurate) == Verdict::inaccurate);
  CHECK(verdict_of(drifting, deterministic, inaccurate) == Verdict::drift);
  CHECK(verdict_of(drifting, flaky, inaccurate) == Verdict::nondeterministic);
}

TEST_CASE("the exit code from the summary: 0 pass, 1 findings or a blind control, 3 errors",
          "[pipeline][summary]") {
  Summary summary;
  summary.verdicts = {{"pass", 4}, {"skipped", 2}};
  CHECK(exit_code_of(summary) == 0);

  for (const char* finding : {"drift", "nondeterministic", "inaccurate"}) {
    Summary with_finding = summary;
    with_finding.verdicts[finding] = 1;
    CHECK(exit_code_of(with_finding) == 1);
  }

  Summary blind = summary;
  blind.harness_failures.push_back("control matmul/x bf16 forward did not drift");
  CHECK(exit_code_of(blind) == 1);
  CHECK(exit_code_of(shard_summary(blind)) == 0);  // judged on the merged report
  CHECK(shard_summary(blind).harness_failures.empty());

  Summary errored = blind;
  errored.verdicts["error"] = 1;
  CHECK(exit_code_of(errored) == 3);
  Summary control_errored = summary;
  control_errored.control_errors = 1;
  CHECK(exit_code_of(control_errored) == 3);
  CHECK(exit_code_of(shard_summary(errored)) == 3);
}

TEST_CASE("a case result survives its JSON round trip", "[pipeline][json]") {
  using case_support::make_case;
  auto& world = case_support::world();
  Runner runner(world.registry, world.contract);
  std::vector<CaseResult> results = {
      runner.run_case(make_case("matmul", "cpu-split-k-by-rows", DType::bf16, Pass::forward,
                                {{"N", 64}, {"K", 128}}, 7, 1)),
      runner.run_case(
          make_case("rmsnorm", "cpu-fixed-order", DType::fp32, Pass::backward, {{"H", 64}}, 5, 2)),
      runner.run_case(make_case("matmul", "cpu-fixed-order", DType::bf16, Pass::forward,
                                {{"N", 64}, {"K", 128}}, 3, 1)),
  };
  REQUIRE(results[0].verdict == Verdict::drift);
  REQUIRE_FALSE(results[0].drift.empty());
  CaseResult extreme = results[0];
  extreme.drift.front().max_abs_diff = std::numeric_limits<double>::infinity();
  extreme.drift.front().max_rel_diff = std::numeric_limits<double>::quiet_NaN();
  extreme.drift.front().first_mismatch->actual = std::numeric_limits<float>::quiet_NaN();
  extreme.impl_config = {{"path", "test"}, {"pins", {1, 2, 3}}};
  extreme.spec.special_values = 0.01;
  results.push_back(extreme);
  CaseResult failed = results[1];
  failed.verdict = Verdict::error;
  failed.reason = "the impl threw";
  failed.fingerprint.clear();
  results.push_back(failed);
  CaseResult skipped;
  skipped.spec = results[2].spec;
  skipped.spec.dtype_name = "fp8";
  skipped.reason = "dtype fp8 is out of scope";
  results.push_back(skipped);

  for (const CaseResult& result : results) {
    const nlohmann::json written = case_to_json(result);
    const nlohmann::json line = nlohmann::json::parse(written.dump());  // as a worker sends it
    CaseResult read = case_from_json(JsonCursor(line, "test"));
    CHECK(case_to_json(read).dump() == written.dump());
    CHECK(read.verdict == result.verdict);
    CHECK(read.drift.size() == result.drift.size());
    CHECK(read.fingerprint == result.fingerprint);
  }
}

TEST_CASE("an op extends the report through its report extension, never by name",
          "[pipeline][json]") {
  const Registry& registry = case_support::world().registry;
  int extended = 0;
  for (const OpDef* op : registry.ops()) {
    if (!op->report_extension) continue;
    ++extended;
    CHECK_FALSE(op->report_extension->key.empty());
    CHECK(op->report_extension->details);
  }
  CHECK(extended >= 1);  // the chain
  CaseResult plain = case_support::run(case_support::make_case(
      "rmsnorm", "cpu-fixed-order", DType::bf16, Pass::forward, {{"H", 64}}, 3, 1));
  CHECK(case_entry(plain, registry) == case_to_json(plain));
}
