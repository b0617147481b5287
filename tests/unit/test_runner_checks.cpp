// Each check of the runner proven able to fail: the CPU controls drift (and the finding names
// tensor, layout, magnitudes and the first mismatch's bits), test-only impls come out
// nondeterministic, inaccurate, error or drift on pad layouts, and a control that passes is
// reported as a failure of the harness itself. Exit codes follow the verdicts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "manifest.h"
#include "report/report.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

// A forward-only matmul summing K in index order per row; subclasses misbehave on purpose.
class TestMatmul : public Impl {
 public:
  TestMatmul(const std::string& name, bool claims_invariance, const std::string& backend = "cpu")
      : Impl((claims_invariance ? ImplInfo::invariant(name, backend, "test-only matmul")
                                : ImplInfo::control(name, backend, "test-only matmul"))
                 .only_passes({Pass::forward})) {}
  void run(Batch& batch) override {
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    const Tensor& x = batch.in("x");
    const Tensor& w = batch.in("w");
    Tensor& y = batch.out("y");
    const float extra = extra_term(batch);
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (std::int64_t c = 0; c < k; ++c) sum += x.get(s * k + c) * w.get(j * k + c);
        y.set(s * n + j, sum * scale() + extra);
      }
    }
    after(batch);
  }

 protected:
  virtual float scale() const { return 1.0f; }
  virtual float extra_term(const Batch&) const { return 0.0f; }
  virtual void after(Batch&) {}
};

// Flips the lowest bit of its first real output on every second run of a layout.
class FlakyMatmul : public TestMatmul {
 public:
  FlakyMatmul() : TestMatmul("test-flaky", true) {}

 protected:
  void after(Batch& batch) override {
    if (batch.invocation_index == 0) ++layout_runs_;
    if (layout_runs_ % 2 == 1) return;
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      const std::int64_t index = s * y.row_size();
      y.set_bits(index, y.bits(index) ^ 1u);
      return;
    }
  }

 private:
  int layout_runs_ = 0;
};

// Invariant and deterministic, but 3% off: well outside every threshold.
class OffByPercentMatmul : public TestMatmul {
 public:
  OffByPercentMatmul() : TestMatmul("test-off-by-3-percent", true) {}

 protected:
  float scale() const override { return 1.03f; }
};

class ThrowingMatmul : public TestMatmul {
 public:
  ThrowingMatmul() : TestMatmul("test-throws", true) {}

 protected:
  void after(Batch&) override { throw std::runtime_error("launch failed: test device on fire"); }
};

// Reads every slot of the batch, pads included (a masked load that is not masked): adds 0 * the
// sum of column 0 over all slots, which is harmless unless a pad slot's NaN is read.
class PadReadingMatmul : public TestMatmul {
 public:
  PadReadingMatmul() : TestMatmul("test-reads-pads", true) {}

 protected:
  float extra_term(const Batch& batch) const override {
    const Tensor& x = batch.in("x");
    float sum = 0.0f;
    for (std::int64_t s = 0; s < batch.slots(); ++s) sum += x.get(s * x.row_size());
    return 0.0f * sum;
  }
};

// Flips the lowest bit of one element of one logical row, only where that row is not computed in
// the batch layout (one invocation of every row in order): a drift in one row of a large batch.
class OneRowMatmul : public TestMatmul {
 public:
  static constexpr std::int64_t planted_row = 2999;
  OneRowMatmul() : TestMatmul("test-one-row-drifts", true) {}

 protected:
  void after(Batch& batch) override {
    const Invocation& invocation = *batch.invocation;
    bool batch_layout = invocation.slots() == batch.spec->rows;
    for (std::int64_t s = 0; batch_layout && s < invocation.slots(); ++s)
      batch_layout = invocation.slot_rows[static_cast<std::size_t>(s)] == s;
    if (batch_layout) return;
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (invocation.slot_rows[static_cast<std::size_t>(s)] != planted_row) continue;
      const std::int64_t index = s * y.row_size() + 5;
      y.set_bits(index, y.bits(index) ^ 1u);
    }
  }
};

class OtherBackendMatmul : public TestMatmul {
 public:
  OtherBackendMatmul() : TestMatmul("test-other-backend", true, "test-accelerator") {}
};

struct World {
  Registry registry;
  Contract contract;
  std::vector<std::string> op_order;
  World() {
    register_all(registry);
    registry.add_impl("matmul", std::make_unique<FlakyMatmul>());
    registry.add_impl("matmul", std::make_unique<OffByPercentMatmul>());
    registry.add_impl("matmul", std::make_unique<ThrowingMatmul>());
    registry.add_impl("matmul", std::make_unique<PadReadingMatmul>());
    registry.add_impl("matmul", std::make_unique<OneRowMatmul>());
    registry.add_impl("matmul", std::make_unique<OtherBackendMatmul>());
    // A "control" that is in fact invariant: the harness must report that it lost its sight.
    registry.add_impl("matmul", std::make_unique<TestMatmul>("test-invariant-control", false));
    contract = load_embedded_contract(registry);
    for (const OpDef* op : registry.ops()) op_order.push_back(op->name);
  }
};

CaseSpec make_case(const std::string& op, const std::string& impl, Pass pass, std::int64_t rows,
                   std::vector<std::string> layouts, DType dtype = DType::bf16) {
  CaseSpec spec;
  spec.op = op;
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.pass = pass;
  // Large enough rows that a changed fp32 summation order shows through bf16 output rounding.
  spec.dims = op == "matmul" ? Dims{{"N", 16}, {"K", 128}} : Dims{{"H", 1000}};
  spec.rows = rows;
  spec.seed = 1;
  spec.layouts = std::move(layouts);
  return spec;
}

const std::vector<std::string> all_layouts = {"alone",    "batch",  "shuffled",  "pad_right",
                                              "pad_left", "ragged", "microbatch"};

// Checks that a drift finding is complete and that its first mismatch is what the two layouts
// really produced, bit for bit.
void check_finding(const DriftMetrics& metrics, const CaseArtifacts& artifacts) {
  INFO("layout " << metrics.layout << " vs " << metrics.reference_layout << ", tensor "
                 << metrics.tensor);
  CHECK_FALSE(metrics.tensor.empty());
  CHECK_FALSE(metrics.layout.empty());
  CHECK(metrics.layout != metrics.reference_layout);
  CHECK(metrics.mismatch_count > 0);
  CHECK(metrics.rows_differing > 0);
  CHECK(metrics.max_abs_diff > 0.0);
  CHECK(metrics.max_rel_diff > 0.0);
  CHECK(metrics.max_ulp_distance > 0);
  REQUIRE(metrics.first_mismatch.has_value());
  const Mismatch& first = *metrics.first_mismatch;
  CHECK(first.expected_bits != first.actual_bits);
  const Tensor& expected = artifacts.layout_outputs.at(metrics.reference_layout).at(metrics.tensor);
  const Tensor& actual = artifacts.layout_outputs.at(metrics.layout).at(metrics.tensor);
  const std::int64_t index = first.row * expected.row_size() + first.column;
  CHECK(expected.bits(index) == first.expected_bits);
  CHECK(actual.bits(index) == first.actual_bits);
  CHECK(first.expected == expected.get(index));
  CHECK(first.actual == actual.get(index));

  nlohmann::json j = drift_to_json(metrics);
  const std::size_t hex_width = 2 + 2 * dtype_size(metrics.dtype);
  const std::string expected_hex = j["first_mismatch"]["expected_bits"];
  CHECK(expected_hex == hex_bits(metrics.dtype, first.expected_bits));
  CHECK(expected_hex.size() == hex_width);
  CHECK(j["first_mismatch"]["actual_bits"] == hex_bits(metrics.dtype, first.actual_bits));
  CHECK(j["tensor"] == metrics.tensor);
  CHECK(j["layout"] == metrics.layout);
}

std::set<std::string> drifted_layouts(const CaseResult& result) {
  std::set<std::string> layouts;
  for (const auto& d : result.drift) layouts.insert(d.layout);
  return layouts;
}

}  // namespace

TEST_CASE("invariance: the forward CPU controls drift, and the finding is complete",
          "[runner][invariance]") {
  World world;
  Runner runner(world.registry, world.contract);
  const auto control = GENERATE(as<std::pair<std::string, std::string>>{},
                                std::make_pair("matmul", "cpu-split-k-by-rows"),
                                std::make_pair("rmsnorm", "cpu-split-row-small-batch"));
  const DType dtype = GENERATE(DType::bf16, DType::fp32);
  CaseSpec spec = make_case(control.first, control.second, Pass::forward, 7, all_layouts, dtype);
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(spec, &artifacts);
  INFO(spec.id() << " " << result.reason);
  CHECK(result.is_control);
  CHECK(result.expected_to_drift);
  REQUIRE(result.verdict == Verdict::drift);
  REQUIRE_FALSE(result.drift.empty());
  for (const auto& metrics : result.drift) {
    CHECK(metrics.tensor == "y");
    CHECK(metrics.reference_layout == "alone");
    CHECK(metrics.dtype == dtype);
    check_finding(metrics, artifacts);
  }
  // The split happens for every invocation with fewer than 4 rows, so every batched layout
  // (7 rows in one invocation) differs from rows computed alone.
  for (const char* layout : {"batch", "shuffled", "pad_right", "pad_left"})
    CHECK(drifted_layouts(result).count(layout) == 1);
}

TEST_CASE("invariance: a control whose failure model does not apply does not drift",
          "[runner][invariance]") {
  // With 3 rows every invocation splits, alone or batched: the same order everywhere.
  World world;
  Runner runner(world.registry, world.contract);
  const DType dtype = GENERATE(DType::bf16, DType::fp32);
  CaseSpec spec = make_case("matmul", "cpu-split-k-by-rows", Pass::forward, 3,
                            {"alone", "batch", "shuffled"}, dtype);
  CaseResult result = runner.run_case(spec);
  INFO(result.reason);
  CHECK(result.drift.empty());
  CHECK(result.nondeterminism.empty());
  CHECK(result.layout_comparisons > 0);
  // In fp32 the split only reorders the sum: accurate too. (In bf16 its partials are rounded to
  // bf16, which the accuracy check may catch: that is not the invariance check's business.)
  if (dtype == DType::fp32) CHECK(result.verdict == Verdict::pass);
}

TEST_CASE("invariance: the token-reduction CPU controls drift in their reduction",
          "[runner][invariance]") {
  World world;
  Runner runner(world.registry, world.contract);
  const auto control = GENERATE(as<std::pair<std::string, std::string>>{},
                                std::make_pair("matmul", "cpu-dw-tree-by-tokens"),
                                std::make_pair("rmsnorm", "cpu-dweight-tree-by-tokens"));
  const std::string reduction = control.first == "matmul" ? "dw" : "dweight";
  CaseSpec spec = make_case(control.first, control.second, Pass::backward, 16,
                            {"alone", "batch", "pad_right", "pad_left", "ragged", "microbatch"});
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(spec, &artifacts);
  INFO(spec.id() << " " << result.reason);
  CHECK(result.expected_to_drift);
  REQUIRE(result.verdict == Verdict::drift);
  for (const auto& metrics : result.drift) {
    CHECK(metrics.tensor == reduction);  // the per-row dx stays invariant
    CHECK(metrics.reference_layout == "batch");
    CHECK(metrics.dtype == DType::fp32);
    check_finding(metrics, artifacts);
  }
  CHECK(drifted_layouts(result).count("pad_right") == 1);

  // Forward is not part of its failure model: it neither drifts nor is expected to.
  CaseResult forward =
      runner.run_case(make_case(control.first, control.second, Pass::forward, 16, all_layouts));
  CHECK_FALSE(forward.expected_to_drift);
  CHECK(forward.verdict == Verdict::pass);
}

TEST_CASE("invariance: an impl that reads pad slots drifts exactly on the padded layouts",
          "[runner][invariance]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(
      make_case("matmul", "test-reads-pads", Pass::forward, 9, all_layouts), &artifacts);
  INFO(result.reason);
  REQUIRE(result.verdict == Verdict::drift);
  CHECK(drifted_layouts(result) == std::set<std::string>{"pad_left", "pad_right", "ragged"});
  for (const auto& metrics : result.drift) {
    REQUIRE(metrics.first_mismatch.has_value());
    CHECK(std::isnan(metrics.first_mismatch->actual));
    CHECK(metrics.max_ulp_distance == std::numeric_limits<std::uint64_t>::max());
    CHECK(metrics.rows_differing == 9);
  }
}

TEST_CASE("invariance: one differing row far past the alone sample of a large batch is found",
          "[runner][invariance]") {
  // 4096 rows, 64 of them computed alone: the planted row is compared against the batch layout.
  World world;
  Runner runner(world.registry, world.contract);
  CaseSpec spec = make_case("matmul", "test-one-row-drifts", Pass::forward, 4096,
                            {"alone", "batch", "shuffled"});
  spec.dims = {{"N", 8}, {"K", 16}};
  const std::vector<std::int64_t> alone = select_alone_rows(spec, spec.rows);
  REQUIRE(alone.size() == 64);
  REQUIRE(std::count(alone.begin(), alone.end(), OneRowMatmul::planted_row) == 0);
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(spec, &artifacts);
  INFO(result.reason);
  REQUIRE(result.verdict == Verdict::drift);
  REQUIRE(result.drift.size() == 1);
  const DriftMetrics& finding = result.drift.front();
  CHECK(finding.layout == "shuffled");
  CHECK(finding.reference_layout == canonical_reduction_layout);
  CHECK(finding.mismatch_count == 1);
  CHECK(finding.rows_differing == 1);
  CHECK(finding.differing_rows == std::vector<std::int64_t>{OneRowMatmul::planted_row});
  REQUIRE(finding.first_mismatch);
  CHECK(finding.first_mismatch->row == OneRowMatmul::planted_row);
  CHECK(finding.first_mismatch->column == 5);
  check_finding(finding, artifacts);
}

TEST_CASE("determinism: an impl that changes its output on every second run is nondeterministic",
          "[runner][determinism]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseResult result =
      runner.run_case(make_case("matmul", "test-flaky", Pass::forward, 3, {"alone"}));
  INFO(result.reason);
  REQUIRE(result.verdict == Verdict::nondeterministic);
  REQUIRE(result.nondeterminism.size() == 1);
  const DriftMetrics& metrics = result.nondeterminism[0];
  CHECK(metrics.tensor == "y");
  CHECK(metrics.layout == "alone repeat 2");
  CHECK(metrics.reference_layout == "alone");
  CHECK(metrics.mismatch_count == 3);  // one flipped bit in each of the 3 rows of the second run
  CHECK(metrics.rows_differing == 3);
  CHECK(metrics.max_ulp_distance == 1);
  REQUIRE(metrics.first_mismatch.has_value());
  CHECK((metrics.first_mismatch->expected_bits ^ metrics.first_mismatch->actual_bits) == 1u);
}

TEST_CASE("accuracy: an invariant impl that is 3% off is inaccurate", "[runner][accuracy]") {
  World world;
  Runner runner(world.registry, world.contract);
  const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp32);
  CaseResult result = runner.run_case(
      make_case("matmul", "test-off-by-3-percent", Pass::forward, 5, all_layouts, dtype));
  INFO(result.reason);
  REQUIRE(result.verdict == Verdict::inaccurate);
  CHECK(result.drift.empty());
  CHECK(result.nondeterminism.empty());
  REQUIRE(result.accuracy.size() == 1);
  const AccuracyMetrics& accuracy = result.accuracy[0];
  CHECK(accuracy.tensor == "y");
  CHECK_FALSE(accuracy.passed());
  CHECK(accuracy.violations > 0);
  CHECK(accuracy.nan_count == 0);
  const Threshold& threshold = world.contract.threshold("matmul", to_string(dtype));
  CHECK(accuracy.atol == threshold.atol);
  CHECK(accuracy.rtol == threshold.rtol);
  CHECK(accuracy.max_rel_error > threshold.rtol);
  CHECK(accuracy.worst.has_value());
}

TEST_CASE("the honest CPU impls pass every check", "[runner]") {
  World world;
  Runner runner(world.registry, world.contract);
  for (const char* op : {"matmul", "rmsnorm"}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
        CaseSpec spec = make_case(op, "cpu-fixed-order", pass, 7, all_layouts, dtype);
        CaseResult result = runner.run_case(spec);
        INFO(spec.id() << " " << result.reason);
        CHECK(result.verdict == Verdict::pass);
        CHECK(result.layouts_run.size() == all_layouts.size());
        CHECK(result.layout_comparisons > 0);
        CHECK(result.fingerprint.size() == 16);
        for (const auto& accuracy : result.accuracy) CHECK(accuracy.passed());
      }
    }
  }
}

TEST_CASE("the canonical fingerprint depends on the bits, not on the run", "[runner]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseSpec spec = make_case("matmul", "cpu-fixed-order", Pass::forward, 5, {"alone", "batch"});
  std::string first = runner.run_case(spec).fingerprint;
  CHECK(runner.run_case(spec).fingerprint == first);
  spec.seed = 2;
  CHECK(runner.run_case(spec).fingerprint != first);
}

TEST_CASE("an impl that throws comes out error with its message", "[runner][error]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseResult result =
      runner.run_case(make_case("matmul", "test-throws", Pass::forward, 3, all_layouts));
  CHECK(result.verdict == Verdict::error);
  CHECK_THAT(result.reason, Catch::Contains("launch failed: test device on fire"));
  CHECK(case_to_json(result)["reason"] == result.reason);
}

TEST_CASE("skips say why: unsupported pass, unavailable backend", "[runner][skip]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseResult backward =
      runner.run_case(make_case("matmul", "test-flaky", Pass::backward, 3, all_layouts));
  CHECK(backward.verdict == Verdict::skipped);
  CHECK_THAT(backward.reason, Catch::Contains("no backward pass"));
  CaseResult elsewhere =
      runner.run_case(make_case("matmul", "test-other-backend", Pass::forward, 3, all_layouts));
  CHECK(elsewhere.verdict == Verdict::skipped);
  CHECK_THAT(elsewhere.reason,
             Catch::Contains("backend unavailable") && Catch::Contains("test-accelerator"));
}

TEST_CASE("a control that passes is reported as a failure of the harness itself",
          "[runner][summary]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseResult honest =
      runner.run_case(make_case("matmul", "cpu-fixed-order", Pass::forward, 7, all_layouts));
  CaseResult blind =
      runner.run_case(make_case("matmul", "test-invariant-control", Pass::forward, 7, all_layouts));
  REQUIRE(honest.verdict == Verdict::pass);
  REQUIRE(blind.is_control);
  REQUIRE(blind.verdict == Verdict::pass);
  Summary summary = summarize({honest, blind}, world.op_order);
  REQUIRE(summary.harness_failures.size() == 1);
  CHECK_THAT(summary.harness_failures[0],
             Catch::Contains("test-invariant-control") && Catch::Contains("lost its sight"));
  CHECK(summary.exit_code == 1);
  REQUIRE(summary.controls.size() == 1);
  CHECK(summary.controls[0].lost_sight());
  CHECK(summary.verdicts.at("pass") == 1);  // controls are not counted with invariant impls
  CHECK_FALSE(summary.first_failing_op.has_value());
}

TEST_CASE("exit codes: 0 all pass (controls drifting), 1 findings, 3 errors", "[runner][summary]") {
  World world;
  Runner runner(world.registry, world.contract);
  std::vector<CaseResult> results;
  for (const char* op : {"matmul", "rmsnorm"}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      results.push_back(runner.run_case(make_case(op, "cpu-fixed-order", pass, 7, all_layouts)));
    }
  }
  results.push_back(
      runner.run_case(make_case("matmul", "cpu-split-k-by-rows", Pass::forward, 7, all_layouts)));
  REQUIRE(results.back().verdict == Verdict::drift);

  Summary all_pass = summarize(results, world.op_order);
  CHECK(all_pass.exit_code == 0);
  CHECK(all_pass.harness_failures.empty());
  CHECK(all_pass.verdicts.at("pass") == 4);
  CHECK(all_pass.verdicts.count("drift") == 0);  // the control's drift is expected, not a finding
  REQUIRE(all_pass.controls.size() == 1);
  CHECK(all_pass.controls[0].drifted == 1);
  CHECK_FALSE(all_pass.first_failing_op.has_value());

  std::vector<CaseResult> with_finding = results;
  with_finding.push_back(
      runner.run_case(make_case("matmul", "test-off-by-3-percent", Pass::forward, 3, all_layouts)));
  Summary finding = summarize(with_finding, world.op_order);
  CHECK(finding.exit_code == 1);
  REQUIRE(finding.first_failing_op.has_value());
  CHECK(*finding.first_failing_op == "matmul");
  CHECK(*finding.first_failing_case == with_finding.back().spec.id());

  std::vector<CaseResult> with_error = with_finding;
  with_error.push_back(
      runner.run_case(make_case("matmul", "test-throws", Pass::forward, 3, all_layouts)));
  CHECK(summarize(with_error, world.op_order).exit_code == 3);
}
