// The counter-based generator (a pure function of its key; a logical row holds the same bits in
// every layout, rounded to the dtype, never constant) and the layouts' coverage rules.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "core/rng.h"
#include "core/special_values.h"
#include "manifest.h"
#include "run/input_generator.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

CaseSpec layout_spec(std::int64_t rows, std::uint64_t seed, std::int64_t alone_rows = 64) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = "cpu-fixed-order";
  spec.dtype_name = "bf16";
  spec.dtype = DType::bf16;
  spec.dims = {{"N", 8}, {"K", 16}};
  spec.rows = rows;
  spec.seed = seed;
  spec.alone_rows = alone_rows;
  spec.layouts = known_layouts();
  return spec;
}

std::vector<std::int64_t> iota_rows(std::int64_t rows) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::vector<std::int64_t> real_rows_in_order(const Layout& layout) {
  std::vector<std::int64_t> rows;
  for (const auto& invocation : layout.invocations) {
    for (std::int64_t row : invocation.slot_rows) {
      if (row >= 0) rows.push_back(row);
    }
  }
  return rows;
}

std::int64_t pad_slots(const Layout& layout) {
  std::int64_t pads = 0;
  for (const auto& invocation : layout.invocations)
    pads += invocation.slots() - invocation.valid_rows();
  return pads;
}

}  // namespace

TEST_CASE("counter_uniform is a pure function of (seed, name, row, column)", "[rng]") {
  const std::uint64_t x = hash_name("x");
  const float value = counter_uniform(7, x, 3, 11);
  CHECK(counter_uniform(7, x, 3, 11) == value);  // same key, same bits, any time
  CHECK(counter_uniform(8, x, 3, 11) != value);
  CHECK(counter_uniform(7, hash_name("w"), 3, 11) != value);
  CHECK(counter_uniform(7, x, 4, 11) != value);
  CHECK(counter_uniform(7, x, 3, 12) != value);
  // Row and column are not interchangeable.
  CHECK(counter_uniform(7, x, 11, 3) != value);
}

TEST_CASE("the counter hash keeps its bits: (seed 7, \"x\", row 3, column 11)", "[rng]") {
  // splitmix64 finalizers over seed, name, row and column, computed independently: a change to the
  // hash (or to its row / column split) changes every input of every case.
  CHECK(counter_bits(7, hash_name("x"), 3, 11) == 0xc205cbccab38ea32ull);
  CHECK(counter_uniform(7, hash_name("x"), 3, 11) == 0.5158017873764038f);
  CHECK(counter::column_hash(counter::row_hash(7, hash_name("x"), 3), 11) ==
        counter::key_hash(7, hash_name("x"), 3, 11));
}

TEST_CASE("generate_input's rows are the per-element draws, special values and scales included",
          "[rng]") {
  const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp32);
  const double rate = GENERATE(0.0, 0.25);
  TensorDecl decl;
  decl.name = "x";
  decl.dtype = dtype;
  decl.scale = 0.75f;
  decl.group_scales = {1.0f, 3.0f, 0.125f};
  const std::int64_t rows = 301, width = 700;  // split over threads, groups of uneven width
  const Tensor tensor = generate_input(decl, {rows, width}, 9, rate);
  const std::vector<float> scales = column_scales(decl, width);
  std::int64_t mismatches = 0, specials = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < width; ++c) {
      std::uint32_t expected = encode_bits(
          dtype, counter_uniform(9, hash_name("x"), r, c) * scales[static_cast<std::size_t>(c)]);
      const SpecialElement special = special_value_at(dtype, 9, hash_name("x"), r, c, rate);
      if (special.kind != SpecialValue::none) {
        expected = special.bits;
        ++specials;
      }
      mismatches += tensor.bits(r * width + c) != expected ? 1 : 0;
    }
  }
  CHECK(mismatches == 0);
  if (rate > 0) CHECK(specials > rows * width / 8);
}

TEST_CASE("counter_uniform is uniform on -1 <= u < 1 with 24 random bits", "[rng]") {
  double sum = 0, low = 1, high = -1;
  std::set<float> distinct;
  const int samples = 20000;
  for (int i = 0; i < samples; ++i) {
    float v = counter_uniform(1, hash_name("x"), i / 100, i % 100);
    REQUIRE(v >= -1.0f);
    REQUIRE(v < 1.0f);
    float scaled = v * 8388608.0f;  // 2^23: 24 bits in [-1, 1) are integers here
    REQUIRE(scaled == std::floor(scaled));
    sum += v;
    low = std::min<double>(low, v);
    high = std::max<double>(high, v);
    distinct.insert(v);
  }
  CHECK(std::fabs(sum / samples) < 0.03);
  CHECK(low < -0.99);
  CHECK(high > 0.99);
  CHECK(distinct.size() > samples * 99 / 100);
}

TEST_CASE("hash_name is 64-bit FNV-1a (stable across platforms)", "[rng]") {
  CHECK(hash_name("") == 0xcbf29ce484222325ull);
  CHECK(hash_name("a") == 0xaf63dc4c8601ec8cull);
  CHECK(hash_name("x") != hash_name("y"));
}

TEST_CASE("counter_index stays below its bound and depends only on the key", "[rng]") {
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    std::uint64_t value = counter_index(3, hash_name("ids"), i, 0, 10);
    REQUIRE(value < 10);
    REQUIRE(counter_index(3, hash_name("ids"), i, 0, 10) == value);
    seen.insert(value);
  }
  CHECK(seen.size() == 10);
}

TEST_CASE("layouts: alone computes each selected row in a batch of one", "[layout]") {
  for (std::int64_t rows : {1, 3, 16, 100}) {
    CaseSpec spec = layout_spec(rows, 5, 10);
    std::vector<std::int64_t> selected = select_alone_rows(spec);
    Layout alone = make_layout("alone", spec, selected, 1);
    INFO("rows " << rows);
    CHECK(alone.name == "alone");
    REQUIRE(alone.invocations.size() == selected.size());
    for (std::size_t i = 0; i < selected.size(); ++i) {
      CHECK(alone.invocations[i].slot_rows == std::vector<std::int64_t>{selected[i]});
    }
    CHECK(alone.covers_all_rows_in_order == (static_cast<std::int64_t>(selected.size()) == rows));
  }
}

TEST_CASE("layouts: batch, pads, ragged and microbatch cover every row once, in order",
          "[layout]") {
  for (std::int64_t rows : {1, 2, 3, 7, 16, 33, 100}) {
    for (std::uint64_t seed : {1u, 2u, 3u, 99u}) {
      for (std::int64_t granularity : {1, 4}) {
        CaseSpec spec = layout_spec(rows, seed);
        std::vector<std::int64_t> selected = select_alone_rows(spec);
        INFO("rows " << rows << " seed " << seed << " granularity " << granularity);
        for (const char* name : {"batch", "pad_right", "pad_left", "ragged", "microbatch"}) {
          INFO("layout " << name);
          Layout layout = make_layout(name, spec, selected, granularity);
          CHECK(layout.name == name);
          CHECK(layout.covers_all_rows_in_order);
          CHECK(real_rows_in_order(layout) == iota_rows(rows));
        }

        Layout batch = make_layout("batch", spec, selected, granularity);
        REQUIRE(batch.invocations.size() == 1);
        CHECK(pad_slots(batch) == 0);

        Layout right = make_layout("pad_right", spec, selected, granularity);
        REQUIRE(right.invocations.size() == 1);
        CHECK(pad_slots(right) >= 1);
        const auto& right_slots = right.invocations[0].slot_rows;
        CHECK(std::is_partitioned(right_slots.begin(), right_slots.end(),
                                  [](std::int64_t r) { return r >= 0; }));

        Layout left = make_layout("pad_left", spec, selected, granularity);
        REQUIRE(left.invocations.size() == 1);
        CHECK(pad_slots(left) >= 1);
        const auto& left_slots = left.invocations[0].slot_rows;
        CHECK(std::is_partitioned(left_slots.begin(), left_slots.end(),
                                  [](std::int64_t r) { return r < 0; }));

        Layout ragged = make_layout("ragged", spec, selected, granularity);
        CHECK(pad_slots(ragged) >= 1);
        if (rows >= 7) {  // several sequences: some pad slot sits between two real rows
          const auto& slots = ragged.invocations[0].slot_rows;
          bool pad_between = false;
          for (std::size_t s = 1; s + 1 < slots.size(); ++s) {
            pad_between = pad_between || (slots[s] < 0 && slots[s + 1] >= 0);
          }
          CHECK(pad_between);
        }

        Layout micro = make_layout("microbatch", spec, selected, granularity);
        CHECK(pad_slots(micro) == 0);
        if (rows > granularity) CHECK(micro.invocations.size() >= 2);
        std::int64_t start = 0;
        for (const auto& invocation : micro.invocations) {
          CHECK(start % granularity == 0);  // boundaries at multiples of the token granularity
          start += invocation.slots();
        }
      }
    }
  }
}

TEST_CASE("layouts: shuffled is a permutation and does not claim in-order coverage", "[layout]") {
  bool some_reordered = false;
  for (std::int64_t rows : {1, 2, 7, 33}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      CaseSpec spec = layout_spec(rows, seed);
      Layout shuffled = make_layout("shuffled", spec, select_alone_rows(spec), 1);
      REQUIRE(shuffled.invocations.size() == 1);
      std::vector<std::int64_t> slots = shuffled.invocations[0].slot_rows;
      CHECK_FALSE(shuffled.covers_all_rows_in_order);
      some_reordered = some_reordered || slots != iota_rows(rows);
      std::sort(slots.begin(), slots.end());
      CHECK(slots == iota_rows(rows));
    }
  }
  CHECK(some_reordered);
}

TEST_CASE("layouts are reproducible from the case and differ across seeds", "[layout]") {
  CaseSpec spec = layout_spec(33, 11);
  std::vector<std::int64_t> selected = select_alone_rows(spec);
  bool any_seed_dependent = false;
  for (const auto& name : known_layouts()) {
    Layout first = make_layout(name, spec, selected, 4);
    Layout second = make_layout(name, spec, selected, 4);
    REQUIRE(first.invocations.size() == second.invocations.size());
    for (std::size_t i = 0; i < first.invocations.size(); ++i) {
      CHECK(first.invocations[i].slot_rows == second.invocations[i].slot_rows);
    }
    CaseSpec other = spec;
    other.seed = 12;
    Layout reseeded = make_layout(name, other, selected, 4);
    bool same = reseeded.invocations.size() == first.invocations.size();
    for (std::size_t i = 0; same && i < first.invocations.size(); ++i) {
      same = reseeded.invocations[i].slot_rows == first.invocations[i].slot_rows;
    }
    any_seed_dependent = any_seed_dependent || !same;
  }
  CHECK(any_seed_dependent);
  CHECK_THROWS_AS(make_layout("zigzag", spec, selected, 1), std::invalid_argument);
  CHECK_FALSE(is_known_layout("zigzag"));
  for (const auto& name : known_layouts()) CHECK(is_known_layout(name));
}

TEST_CASE("select_alone_rows: all rows up to alone_rows, else first, last and a sample",
          "[layout]") {
  CHECK(select_alone_rows(layout_spec(5, 1, 5)) == iota_rows(5));
  CHECK(select_alone_rows(layout_spec(3, 1, 64)) == iota_rows(3));
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    for (std::int64_t alone_rows : {2, 10, 64}) {
      CaseSpec spec = layout_spec(200, seed, alone_rows);
      std::vector<std::int64_t> selected = select_alone_rows(spec);
      INFO("seed " << seed << " alone_rows " << alone_rows);
      CHECK(static_cast<std::int64_t>(selected.size()) == alone_rows);
      CHECK(std::is_sorted(selected.begin(), selected.end()));
      CHECK(std::adjacent_find(selected.begin(), selected.end()) == selected.end());
      CHECK(selected.front() == 0);
      CHECK(selected.back() == 199);
      CHECK(select_alone_rows(spec) == selected);
    }
  }
}

namespace {

// What an impl saw: every presentation of every logical row of `x`, pad slots, and `w`.
struct Seen {
  std::map<std::int64_t, std::vector<std::vector<std::uint32_t>>> x_rows;
  std::int64_t pad_slots = 0, pad_elements_not_nan = 0;
  std::set<std::uint64_t> w_ids;
  std::set<std::vector<std::uint32_t>> w_contents;
};

// A fixed-order matmul that records its inputs. Rows are computed independently, in index order.
class RecordingMatmul : public Impl {
 public:
  explicit RecordingMatmul(std::shared_ptr<Seen> seen)
      : Impl(ImplInfo::invariant("test-recording", "cpu",
                                 "records the inputs each invocation receives")
                 .only_passes({Pass::forward})),
        seen_(std::move(seen)) {}
  void run(Batch& batch) override {
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    const Tensor& x = batch.in("x");
    const Tensor& w = batch.in("w");
    Tensor& y = batch.out("y");
    std::vector<std::uint32_t> w_bits;
    for (std::int64_t i = 0; i < w.numel(); ++i) w_bits.push_back(w.bits(i));
    seen_->w_contents.insert(w_bits);
    seen_->w_ids.insert(batch.input_ids.at("w"));
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) {
        ++seen_->pad_slots;
        for (std::int64_t c = 0; c < k; ++c)
          seen_->pad_elements_not_nan += std::isnan(x.get(s * k + c)) ? 0 : 1;
        continue;
      }
      std::vector<std::uint32_t> row;
      for (std::int64_t c = 0; c < k; ++c) row.push_back(x.bits(s * k + c));
      seen_->x_rows[batch.invocation->slot_rows[static_cast<std::size_t>(s)]].push_back(row);
      for (std::int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (std::int64_t c = 0; c < k; ++c) sum += x.get(s * k + c) * w.get(j * k + c);
        y.set(s * n + j, sum);
      }
    }
  }

 private:
  std::shared_ptr<Seen> seen_;
};

}  // namespace

TEST_CASE("a logical row holds the same dtype-rounded bits in every layout", "[rng][runner]") {
  const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp32);
  auto seen = std::make_shared<Seen>();
  Registry registry;
  register_all(registry);
  registry.add_impl("matmul", std::make_unique<RecordingMatmul>(seen));
  Contract contract = load_embedded_contract(registry);
  Runner runner(registry, contract);

  CaseSpec spec = layout_spec(9, 4);
  spec.impl = "test-recording";
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.dims = {{"N", 4}, {"K", 24}};
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(spec, &artifacts);
  INFO(spec.id() << " " << result.reason);
  CHECK(result.verdict == Verdict::pass);  // an honest fixed-order impl passes every layout

  // The logical inputs are the generator's values rounded to the case dtype.
  const Tensor& x = artifacts.inputs.at("x");
  const std::int64_t k = spec.dim("K");
  std::int64_t rounded = 0, zeros = 0;
  std::set<std::uint32_t> distinct;
  for (std::int64_t r = 0; r < spec.rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      float raw = counter_uniform(spec.seed, hash_name("x"), r, c);
      REQUIRE(x.bits(r * k + c) == encode_bits(dtype, raw));
      rounded += round_to(dtype, raw) != raw ? 1 : 0;
      zeros += x.get(r * k + c) == 0.0f ? 1 : 0;
      distinct.insert(x.bits(r * k + c));
    }
  }
  if (dtype != DType::fp32) CHECK(rounded > 0);  // 24-bit values do not fit: rounding happened
  CHECK(zeros == 0);
  CHECK(distinct.size() > static_cast<std::size_t>(spec.rows * k / 2));  // never constant

  const Tensor& w = artifacts.inputs.at("w");
  const OpDef* op = registry.find_op("matmul");
  float w_scale = 0;
  for (const auto& decl : op->tensors(spec)) {
    if (decl.name == "w") w_scale = decl.scale;
  }
  REQUIRE(w_scale > 0);
  for (std::int64_t j = 0; j < spec.dim("N"); ++j) {
    for (std::int64_t c = 0; c < k; ++c) {
      REQUIRE(w.bits(j * k + c) ==
              encode_bits(dtype, counter_uniform(spec.seed, hash_name("w"), j, c) * w_scale));
    }
  }

  // Every presentation of a logical row, in every layout, equals the logical row bit for bit.
  REQUIRE(seen->x_rows.size() == static_cast<std::size_t>(spec.rows));
  for (const auto& [row, presentations] : seen->x_rows) {
    // alone (twice: repeats), batch, shuffled, pad_right, pad_left, ragged, microbatch
    CHECK(presentations.size() == 8);
    for (const auto& presented : presentations) {
      for (std::int64_t c = 0; c < k; ++c) {
        REQUIRE(presented[static_cast<std::size_t>(c)] == x.bits(row * k + c));
      }
    }
  }
  CHECK(seen->pad_slots > 0);
  CHECK(seen->pad_elements_not_nan == 0);  // pad slots are NaN
  CHECK(seen->w_contents.size() == 1);     // parameters identical in every invocation
  CHECK(seen->w_ids.size() == 1);          // and keep their id
}
