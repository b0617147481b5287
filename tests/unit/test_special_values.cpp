// Special input values: the generator (a pure function of seed, tensor name, row and column; the
// mix of kinds; NaN and Inf confined to some rows), the inputs a case really gets (same in every
// batch, index inputs untouched), the accuracy rules for non-finite values, the contract section,
// the spec field, and invariance catching a NaN payload that differs between layouts.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "core/special_values.h"
#include "manifest.h"
#include "run/compare.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"
#include "spec/spec.h"
#include "unit/case_support.h"

using namespace bitcheck;
using nlohmann::json;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

using case_support::from_bits;
using case_support::from_values;

// cast forward, y32 = fp32(x): exact, except that an invocation of more than one row writes every
// NaN as the canonical quiet NaN (a vector path that canonicalizes, a scalar path that keeps the
// payload). Numerically right everywhere; only the NaN payload depends on the batch.
class NanCanonicalizingCast : public Impl {
 public:
  NanCanonicalizingCast()
      : Impl(ImplInfo::invariant("test-canonical-nan-in-batches", "cpu",
                                 "test-only cast that quiets NaN payloads in batches")
                 .only_passes({Pass::forward})) {}
  void run(Batch& batch) override {
    const Tensor& x = batch.in("x");
    const Tensor& x32 = batch.in("x32");
    Tensor& y32 = batch.out("y32");
    Tensor& y = batch.out("y");
    const bool batched = batch.invocation->valid_rows() > 1;
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t c = 0; c < x.row_size(); ++c) {
        const std::int64_t i = s * x.row_size() + c;
        // Widening keeps every bit: the dtype's bits shifted into the fp32 layout.
        std::uint32_t wide = x.dtype() == DType::bf16 ? x.bits(i) << 16 : float_bits(x.get(i));
        if (batched && std::isnan(float_from_bits(wide))) wide = 0x7fc00000u;
        y32.set_bits(i, wide);
        y.set(i, x32.get(i));
      }
    }
  }
};

struct World {
  Registry registry;
  Contract contract;
  World() {
    register_all(registry);
    registry.add_impl("cast", std::make_unique<NanCanonicalizingCast>());
    contract = load_embedded_contract(registry);
  }
};

World& world() {
  static World instance;
  return instance;
}

CaseSpec make_case(const std::string& op, const std::string& impl, DType dtype, Pass pass,
                   Dims dims, std::int64_t rows,
                   double special_values = default_special_value_rate) {
  CaseSpec spec;
  spec.op = op;
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.pass = pass;
  spec.dims = std::move(dims);
  spec.rows = rows;
  spec.seed = 3;
  spec.layouts = known_layouts();
  spec.special_values = special_values;
  return spec;
}

CaseResult run_case(const CaseSpec& spec, CaseArtifacts* artifacts = nullptr) {
  Runner runner(world().registry, world().contract);
  return runner.run_case(spec, artifacts);
}

std::string describe(const CaseResult& result) {
  std::string text = to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift)
    text += " [drift " + drift.layout + " " + drift.tensor + "]";
  for (const auto& a : result.accuracy) {
    text += " {" + a.tensor + " violations " + std::to_string(a.violations) + " nan " +
            std::to_string(a.nan_count) + " matched " + std::to_string(a.nonfinite_matched) + "}";
  }
  return text;
}

}  // namespace

TEST_CASE("special values are a pure function of (seed, tensor name, row, column)",
          "[special_values]") {
  const std::uint64_t x = hash_name("x");
  std::int64_t differ_by_seed = 0, differ_by_name = 0, selected = 0;
  for (std::int64_t row = 0; row < 64; ++row) {
    for (std::int64_t column = 0; column < 64; ++column) {
      SpecialElement a = special_value_at(DType::bf16, 7, x, row, column, 0.25);
      SpecialElement again = special_value_at(DType::bf16, 7, x, row, column, 0.25);
      CHECK(a.kind == again.kind);
      CHECK(a.bits == again.bits);
      selected += a.kind != SpecialValue::none;
      differ_by_seed += a.kind != special_value_at(DType::bf16, 8, x, row, column, 0.25).kind;
      differ_by_name +=
          a.kind != special_value_at(DType::bf16, 7, hash_name("dy"), row, column, 0.25).kind;
      CHECK(special_value_at(DType::bf16, 7, x, row, column, 0.0).kind == SpecialValue::none);
    }
  }
  CHECK(selected > 0);
  CHECK(differ_by_seed > 0);  // the selection follows the seed and the tensor
  CHECK(differ_by_name > 0);
}

TEST_CASE("the mix: the rate, every kind, four NaN payloads, NaN and Inf only in some rows",
          "[special_values]") {
  const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp32);
  INFO(to_string(dtype));
  const double rate = 1.0 / 16;
  const std::int64_t rows = 400, columns = 500;
  std::map<SpecialValue, std::int64_t> counts;
  std::set<std::uint32_t> nan_payloads, subnormals;
  std::int64_t nonfinite_rows = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const bool allows_nonfinite = row_allows_nonfinite(3, row);
    nonfinite_rows += allows_nonfinite;
    for (std::int64_t column = 0; column < columns; ++column) {
      SpecialElement e = special_value_at(dtype, 3, hash_name("x"), row, column, rate);
      ++counts[e.kind];
      if (e.kind == SpecialValue::none) continue;
      CHECK(classify_bits(dtype, e.bits) == e.kind);  // the bits are what the kind says
      if (dtype_size(dtype) == 2) CHECK(e.bits <= 0xffffu);
      const bool finite =
          e.kind == SpecialValue::subnormal || e.kind == SpecialValue::negative_zero;
      if (!finite) CHECK(allows_nonfinite);
      if (e.kind == SpecialValue::nan) nan_payloads.insert(e.bits);
      if (e.kind == SpecialValue::subnormal) subnormals.insert(e.bits);
    }
  }
  const double total = static_cast<double>(rows * columns);
  const double special = total - static_cast<double>(counts[SpecialValue::none]);
  CHECK(special / total == Approx(rate).epsilon(0.05));
  for (SpecialValue kind :
       {SpecialValue::nan, SpecialValue::positive_infinity, SpecialValue::negative_infinity,
        SpecialValue::subnormal, SpecialValue::negative_zero}) {
    INFO(to_string(kind));
    CHECK(counts[kind] > 100);
  }
  CHECK(nan_payloads.size() == 4);
  CHECK(subnormals.size() > 50);
  // One row in nonfinite_row_period may hold NaN or Inf.
  CHECK(static_cast<double>(nonfinite_rows) / static_cast<double>(rows) ==
        Approx(1.0 / static_cast<double>(nonfinite_row_period)).epsilon(0.25));
}

TEST_CASE("classify_bits knows each dtype's special bit patterns", "[special_values]") {
  CHECK(classify_bits(DType::bf16, 0x7fc1) == SpecialValue::nan);
  CHECK(classify_bits(DType::bf16, 0x7f81) == SpecialValue::nan);  // signaling
  CHECK(classify_bits(DType::bf16, 0xff80) == SpecialValue::negative_infinity);
  CHECK(classify_bits(DType::bf16, 0x0001) == SpecialValue::subnormal);
  CHECK(classify_bits(DType::bf16, 0x0080) == SpecialValue::none);  // smallest normal
  CHECK(classify_bits(DType::fp16, 0x7c00) == SpecialValue::positive_infinity);
  CHECK(classify_bits(DType::fp16, 0x83ff) == SpecialValue::subnormal);
  CHECK(classify_bits(DType::fp16, 0x8000) == SpecialValue::negative_zero);
  CHECK(classify_bits(DType::fp32, 0x00000000u) == SpecialValue::none);
  CHECK(classify_bits(DType::fp32, 0x7f800001u) == SpecialValue::nan);
  CHECK(classify_bits(DType::fp32, 0x007fffffu) == SpecialValue::subnormal);
}

TEST_CASE(
    "a case's row inputs hold the special values, the same in every batch - index inputs are "
    "untouched",
    "[special_values][runner]") {
  SECTION("float row inputs: exactly the generator's choices, whatever the batch size") {
    CaseArtifacts small, large;
    CaseResult a = run_case(
        make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::backward, {{"H", 64}}, 7),
        &small);
    CaseResult b = run_case(
        make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::backward, {{"H", 64}}, 33),
        &large);
    INFO(describe(a) << " / " << describe(b));
    REQUIRE(a.verdict == Verdict::pass);
    REQUIRE(b.verdict == Verdict::pass);
    std::int64_t specials = 0;
    for (const char* name : {"x", "dy"}) {
      const Tensor& x7 = small.inputs.at(name);
      const Tensor& x33 = large.inputs.at(name);
      for (std::int64_t row = 0; row < 7; ++row) {
        for (std::int64_t column = 0; column < 64; ++column) {
          const std::int64_t i = row * 64 + column;
          CHECK(x7.bits(i) == x33.bits(i));  // a logical row is the same in a batch of 7 and of 33
          SpecialElement e = special_value_at(DType::bf16, 3, hash_name(name), row, column,
                                              default_special_value_rate);
          if (e.kind == SpecialValue::none) {
            CHECK(classify_bits(DType::bf16, x7.bits(i)) == SpecialValue::none);
          } else {
            CHECK(x7.bits(i) == e.bits);
            ++specials;
          }
        }
      }
    }
    CHECK(specials > 0);
    // Parameters (the rmsnorm weight) never get special values.
    const Tensor& weight = small.inputs.at("weight");
    for (std::int64_t i = 0; i < weight.numel(); ++i) CHECK(std::isfinite(weight.get(i)));
  }
  SECTION("embedding ids stay valid indices; its dout gets special values") {
    CaseArtifacts artifacts;
    const std::int64_t vocab = 50;
    CaseResult result =
        run_case(make_case("embedding", "cpu-fixed-order", DType::bf16, Pass::backward,
                           {{"V", vocab}, {"H", 64}}, 33, max_special_value_rate),
                 &artifacts);
    INFO(describe(result));
    CHECK(result.verdict == Verdict::pass);
    const Tensor& ids = artifacts.inputs.at("ids");
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      CHECK(ids.get_int(i) >= 0);
      CHECK(ids.get_int(i) < vocab);
    }
    std::int64_t special = 0;
    const Tensor& dout = artifacts.inputs.at("dout");
    for (std::int64_t i = 0; i < dout.numel(); ++i)
      special += classify_bits(DType::bf16, dout.bits(i)) != SpecialValue::none;
    CHECK(special > 0);
  }
  SECTION(
      "embedding's table takes them (its forward has no float row input); the gather copies "
      "them bit for bit, -0 included") {
    CaseArtifacts artifacts;
    CaseResult result = run_case(make_case("embedding", "cpu-fixed-order", DType::bf16,
                                           Pass::forward, {{"V", 64}, {"H", 64}}, 33),
                                 &artifacts);
    INFO(describe(result));
    CHECK(result.verdict == Verdict::pass);
    const Tensor& table = artifacts.inputs.at("table");
    std::map<SpecialValue, std::int64_t> kinds;
    for (std::int64_t i = 0; i < table.numel(); ++i)
      ++kinds[classify_bits(DType::bf16, table.bits(i))];
    CHECK(kinds[SpecialValue::negative_zero] > 0);
    CHECK(kinds[SpecialValue::nan] > 0);
    // Without special values the same table holds none.
    CaseArtifacts plain;
    run_case(make_case("embedding", "cpu-fixed-order", DType::bf16, Pass::forward,
                       {{"V", 64}, {"H", 64}}, 33, 0),
             &plain);
    const Tensor& finite = plain.inputs.at("table");
    std::int64_t special = 0;
    for (std::int64_t i = 0; i < finite.numel(); ++i)
      special += classify_bits(DType::bf16, finite.bits(i)) != SpecialValue::none;
    CHECK(special == 0);
  }
}

TEST_CASE(
    "with special values the invariant CPU impls pass, NaN rows included, and controls still drift",
    "[special_values][runner]") {
  SECTION("rmsnorm spreads a NaN to the whole row, as the reference does") {
    CaseResult result = run_case(
        make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::forward, {{"H", 256}}, 33));
    INFO(describe(result));
    CHECK(result.verdict == Verdict::pass);
    REQUIRE_FALSE(result.accuracy.empty());
    CHECK(result.accuracy[0].nonfinite_matched > 256);  // at least one whole row of NaN, matched
    CHECK(result.accuracy[0].nan_count == 0);
  }
  SECTION("matmul: Inf and NaN reach the output; the split-K control still drifts") {
    CaseResult fixed = run_case(make_case("matmul", "cpu-fixed-order", DType::bf16, Pass::forward,
                                          {{"N", 16}, {"K", 128}}, 33));
    INFO(describe(fixed));
    CHECK(fixed.verdict == Verdict::pass);
    CHECK(fixed.accuracy.at(0).nonfinite_matched > 0);
    CaseResult control = run_case(make_case("matmul", "cpu-split-k-by-rows", DType::bf16,
                                            Pass::forward, {{"N", 16}, {"K", 128}}, 33));
    INFO(describe(control));
    CHECK(control.verdict == Verdict::drift);
  }
  SECTION("the case id and the report say special values were on") {
    CaseSpec spec =
        make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::forward, {{"H", 256}}, 3);
    CHECK_THAT(spec.id(), Catch::EndsWith("/seed=3/special=0.03125"));
    spec.special_values = 0;
    CHECK_THAT(spec.id(), Catch::EndsWith("/seed=3"));
  }
}

TEST_CASE("invariance catches a NaN payload that depends on the batch",
          "[special_values][runner][invariance]") {
  CaseSpec spec = make_case("cast", "test-canonical-nan-in-batches", DType::bf16, Pass::forward,
                            {{"H", 64}}, 16, max_special_value_rate);
  CaseResult result = run_case(spec);
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::drift);
  bool nan_payload_finding = false;
  for (const auto& drift : result.drift) {
    REQUIRE(drift.first_mismatch.has_value());
    const Mismatch& first = *drift.first_mismatch;
    CHECK(drift.tensor == "y32");
    // Both sides NaN: only the payload differs, and it is still drift.
    nan_payload_finding =
        nan_payload_finding || (std::isnan(float_from_bits(first.expected_bits)) &&
                                std::isnan(float_from_bits(first.actual_bits)) &&
                                first.expected_bits != first.actual_bits);
  }
  CHECK(nan_payload_finding);
  // Accuracy alone would not have seen it: every NaN sits where the reference has one.
  for (const auto& accuracy : result.accuracy) CHECK(accuracy.passed());

  // The control: without special values the same impl is invariant (no NaN to canonicalize).
  spec.special_values = 0;
  CaseResult plain = run_case(spec);
  INFO(describe(plain));
  CHECK(plain.verdict == Verdict::pass);
}

TEST_CASE("accuracy under the special-value rules", "[special_values][accuracy]") {
  NonFiniteRules special;
  special.nan_matches_reference = true;
  const std::vector<std::int64_t> rows = {0}, ids = {9};
  const float nan = std::nanf("");
  SECTION("a reference NaN reproduced by the output passes, whatever the payload") {
    Tensor reference = from_values(DType::fp32, 1, {nan, 1.0f});
    Tensor actual = from_bits(DType::fp32, 1, {0xffc00005u, 0x3f800000u});
    AccuracyMetrics metrics = check_accuracy("y", actual, rows, reference, ids, 0, 0, {}, special);
    CHECK(metrics.passed());
    CHECK(metrics.nonfinite_matched == 1);
    CHECK(metrics.nan_count == 0);
    // Without the rules (special values off) the same NaN fails.
    CHECK_FALSE(check_accuracy("y", actual, rows, reference, ids, 0, 0).passed());
  }
  SECTION("a reference NaN the output does not reproduce fails, naming it") {
    Tensor reference = from_values(DType::fp32, 1, {1.0f, nan});
    Tensor actual = from_values(DType::fp32, 1, {1.0f, 0.0f});
    AccuracyMetrics metrics =
        check_accuracy("y", actual, rows, reference, ids, 1e9, 1e9, {}, special);
    CHECK_FALSE(metrics.passed());
    CHECK(metrics.nan_count == 1);
    REQUIRE(metrics.worst.has_value());
    CHECK(metrics.worst->row == 9);
    CHECK(metrics.worst->column == 1);
  }
  SECTION("an output NaN where the reference is finite fails") {
    Tensor reference = from_values(DType::fp32, 1, {1.0f, 2.0f});
    Tensor actual = from_values(DType::fp32, 1, {1.0f, nan});
    AccuracyMetrics metrics =
        check_accuracy("y", actual, rows, reference, ids, 1e9, 1e9, {}, special);
    CHECK_FALSE(metrics.passed());
    CHECK(metrics.nan_count == 1);
  }
  SECTION("a reference infinity must be the same infinity") {
    Tensor reference = from_values(DType::fp32, 1, {inf, -inf});
    CHECK(check_accuracy("y", from_values(DType::fp32, 1, {inf, -inf}), rows, reference, ids, 0, 0,
                         {}, special)
              .passed());
    CHECK(check_accuracy("y", from_values(DType::fp32, 1, {inf, -inf}), rows, reference, ids, 0, 0,
                         {}, special)
              .nonfinite_matched == 2);
    CHECK_FALSE(check_accuracy("y", from_values(DType::fp32, 1, {-inf, -inf}), rows, reference, ids,
                               1e30, 1e30, {}, special)
                    .passed());
    CHECK_FALSE(check_accuracy("y", from_values(DType::fp32, 1, {3e38f, -inf}), rows, reference,
                               ids, 1e30, 1e30, {}, special)
                    .passed());
    CHECK_FALSE(check_accuracy("y", from_values(DType::fp32, 1, {nan, -inf}), rows, reference, ids,
                               1e30, 1e30, {}, special)
                    .passed());
  }
  SECTION("an output infinity where the reference is finite fails") {
    Tensor reference = from_values(DType::fp32, 1, {3e38f, 1.0f});
    AccuracyMetrics metrics = check_accuracy("y", from_values(DType::fp32, 1, {inf, 1.0f}), rows,
                                             reference, ids, 1e30, 1e30, {}, special);
    CHECK_FALSE(metrics.passed());
    CHECK(metrics.violations == 1);
  }
  SECTION("finite positions keep the threshold; -0 equals +0") {
    Tensor reference = from_values(DType::fp32, 1, {nan, 0.0f, 2.0f});
    Tensor actual = from_bits(DType::fp32, 1, {0x7fc00000u, 0x80000000u, float_bits(2.5f)});
    AccuracyMetrics metrics =
        check_accuracy("y", actual, rows, reference, ids, 0.25, 0.0, {}, special);
    CHECK_FALSE(metrics.passed());
    CHECK(metrics.violations == 1);  // 2.5 against 2 with atol 0.25; -0 against +0 is no violation
    CHECK(metrics.nonfinite_matched == 1);
    CHECK(check_accuracy("y", actual, rows, reference, ids, 0.5, 0.0, {}, special).passed());
  }
}

TEST_CASE("the contract's special_values section is read and validated",
          "[special_values][contract]") {
  const Contract& embedded = world().contract;
  CHECK(embedded.special_values.nan == "match_reference_position");
  CHECK(embedded.special_values.infinity == "match_reference_sign");
  CHECK(embedded.special_values.finite == "threshold");
  CHECK(embedded.special_values.signed_zero == "equal");
  CHECK_FALSE(embedded.special_values.note.empty());
  CHECK(embedded.to_json()["special_values"]["nan"] == "match_reference_position");

  const json base = json::parse(embedded_contract_json());
  struct Bad {
    std::function<void(json&)> mutate;
    const char* json_path;
    const char* expected;
  };
  const std::vector<Bad> cases = {
      {[](json& c) { c.erase("special_values"); }, "$.special_values", "missing"},
      {[](json& c) { c["special_values"]["nan"] = "ignore"; }, "$.special_values.nan",
       "\"match_reference_position\" or \"never_passes\""},
      {[](json& c) { c["special_values"]["infinity"] = "any"; }, "$.special_values.infinity",
       "\"match_reference_sign\""},
      {[](json& c) { c["special_values"]["finite"] = 1; }, "$.special_values.finite", "a string"},
      {[](json& c) { c["special_values"]["signed_zero"] = "distinct"; },
       "$.special_values.signed_zero", "\"equal\""},
      {[](json& c) { c["special_values"]["payloads"] = "keep"; }, "$.special_values.payloads",
       "no such field"},
  };
  for (const auto& bad : cases) {
    json document = base;
    bad.mutate(document);
    INFO(bad.json_path);
    try {
      parse_contract(document, "c.json", world().registry);
      FAIL_CHECK("contract accepted");
    } catch (const BadInput& error) {
      CHECK(error.file() == "c.json");
      CHECK(error.json_path() == bad.json_path);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
    }
  }

  SECTION("\"never_passes\" makes a reference NaN fail even with special values") {
    json document = base;
    document["special_values"]["nan"] = "never_passes";
    Contract strict = parse_contract(document, "c.json", world().registry);
    Runner runner(world().registry, strict);
    CaseResult result = runner.run_case(
        make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::forward, {{"H", 256}}, 33));
    INFO(describe(result));
    CHECK(result.verdict == Verdict::inaccurate);
  }
}

TEST_CASE("the spec's special_values field and the command-line rate", "[special_values][spec]") {
  const auto parse = [](const std::string& text) {
    return parse_sweep_spec(json::parse(text), "inline.json", world().registry, world().contract);
  };
  SweepSpec spec = parse(R"({"schema_version": 1, "defaults": {"special_values": true},
      "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}]},
              "rmsnorm": {"shapes": [{"H": 8}], "special_values": 0.125},
              "silu": {"shapes": [{"H": 8}], "special_values": false},
              "gelu_tanh": {"shapes": [{"H": 8}], "special_values": 0}}})");
  REQUIRE(spec.ops.size() == 4);
  std::map<std::string, double> rates;
  for (const auto& sweep : spec.ops) rates[sweep.op] = sweep.special_values;
  CHECK(rates.at("matmul") == default_special_value_rate);  // from the defaults
  CHECK(rates.at("rmsnorm") == 0.125);
  CHECK(rates.at("silu") == 0.0);
  CHECK(rates.at("gelu_tanh") == 0.0);
  SweepOverrides none;
  for (const CaseSpec& c : expand_cases(spec, world().registry, none)) {
    if (c.op == "rmsnorm") CHECK(c.special_values == 0.125);
    if (c.op == "silu") CHECK(c.id().find("/special=") == std::string::npos);
  }

  SweepOverrides off;
  off.special_values = 0.0;
  SweepSpec all_off = apply_overrides(spec, off, world().registry, world().contract);
  for (const auto& sweep : all_off.ops) CHECK(sweep.special_values == 0.0);

  for (const char* bad : {R"("yes")", "0.75", "-0.1"}) {
    INFO(bad);
    std::string text =
        std::string(
            R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}], "special_values": )") +
        bad + "}}}";
    try {
      parse(text);
      FAIL_CHECK("spec accepted");
    } catch (const BadInput& error) {
      CHECK(error.json_path() == "$.ops.matmul.special_values");
      CHECK_THAT(error.expected(), Catch::Contains("true, false or a rate in [0, 0.5]"));
    }
  }
  SweepOverrides too_high;
  too_high.special_values = 0.9;
  try {
    apply_overrides(spec, too_high, world().registry, world().contract);
    FAIL_CHECK("override accepted");
  } catch (const BadInput& error) {
    CHECK(error.json_path() == "--special-values-rate");
  }
}
