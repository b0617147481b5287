// Why the CUDA controls are built the way they are: host emulations of their arithmetic in float,
// rounded to bf16/fp16 like the kernels' outputs, counting the output elements a control changes.
// A control whose change does not survive rounding to the io dtype loses sight (it passes).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/elementwise_math.h"
#include "core/dtype.h"
#include "core/rng.h"

using namespace bitcheck;

namespace {

std::vector<float> random_row(DType dtype, const char* name, std::int64_t row, std::int64_t width) {
  std::vector<float> values(static_cast<std::size_t>(width));
  for (std::int64_t c = 0; c < width; ++c) {
    values[static_cast<std::size_t>(c)] =
        round_to(dtype, counter_uniform(7, hash_name(name), row, c));
  }
  return values;
}

// The CUDA rmsnorm row sum with `threads` threads per row (kernels/rmsnorm/rmsnorm_kernels.cu):
// thread t sums groups of 8 t, t + threads, ... in order; an xor tree per warp; warp 0 adds warp
// sums.
float block_sum_of_squares(const std::vector<float>& v, int threads) {
  const std::size_t groups = v.size() / 8;
  std::vector<float> partial(static_cast<std::size_t>(threads), 0.0f);
  for (std::size_t t = 0; t < partial.size(); ++t) {
    for (std::size_t g = t; g < groups; g += partial.size()) {
      for (std::size_t j = 0; j < 8; ++j) partial[t] += v[g * 8 + j] * v[g * 8 + j];
    }
  }
  for (std::size_t offset = 16; offset > 0; offset /= 2) {
    std::vector<float> next(partial.size());
    for (std::size_t t = 0; t < partial.size(); ++t) next[t] = partial[t] + partial[t ^ offset];
    partial = next;
  }
  float sum = partial[0];
  for (std::size_t w = 32; w < partial.size(); w += 32) sum += partial[w];
  return sum;
}

// The control's split row: 4 column slices, each reduced by a 256-thread block, each partial
// rounded through the io-dtype workspace, added in slice order.
float split_sum_of_squares(DType dtype, const std::vector<float>& v) {
  const std::size_t slice = (v.size() + 3) / 4;
  float sum = 0.0f;
  for (std::size_t first = 0; first < v.size(); first += slice) {
    std::vector<float> part(
        v.begin() + static_cast<std::ptrdiff_t>(first),
        v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), first + slice)));
    part.resize((part.size() + 7) / 8 * 8, 0.0f);  // zero padding adds nothing to a sum of squares
    sum += round_to(dtype, block_sum_of_squares(part, 256));
  }
  return sum;
}

// Output elements of `rows` rows of width `width` whose rounded y = v * r * w differs between two
// ways of summing the squares.
template <typename SumA, typename SumB>
std::int64_t differing_outputs(DType dtype, std::int64_t width, std::int64_t rows, SumA sum_a,
                               SumB sum_b) {
  const std::vector<float> weight = random_row(dtype, "weight", 0, width);
  std::int64_t differing = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::vector<float> x = random_row(dtype, "x", row, width);
    const float n = static_cast<float>(width);
    const float r_a = 1.0f / std::sqrt(sum_a(x) / n + 1e-6f);
    const float r_b = 1.0f / std::sqrt(sum_b(x) / n + 1e-6f);
    for (std::int64_t c = 0; c < width; ++c) {
      const float v = x[static_cast<std::size_t>(c)], w = weight[static_cast<std::size_t>(c)];
      differing += round_to(dtype, v * r_a * w) != round_to(dtype, v * r_b * w);
    }
  }
  return differing;
}

}  // namespace

TEST_CASE("rmsnorm control: a reordered fp32 row sum rarely survives bf16 - io-dtype partials do",
          "[control][rmsnorm]") {
  const std::int64_t rows = 8;  // the GPU sweep's alone rows
  for (std::int64_t width : {2048, 4096, 5120, 8192}) {
    auto fixed = [](const std::vector<float>& x) { return block_sum_of_squares(x, 256); };
    auto wide_block = [](const std::vector<float>& x) { return block_sum_of_squares(x, 1024); };
    // The former control (1024 instead of 256 threads below 256 tokens): the inverse RMS moves by
    // an ulp in some rows, and bf16 outputs almost never change (it lost sight on the H200).
    const std::int64_t reordered = differing_outputs(DType::bf16, width, rows, fixed, wide_block);
    INFO("H=" << width << ": 1024-thread order changes " << reordered << " of " << rows * width
              << " bf16 outputs");
    CHECK(reordered * 10000 < rows * width);
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      auto split = [dtype](const std::vector<float>& x) { return split_sum_of_squares(dtype, x); };
      const std::int64_t changed = differing_outputs(dtype, width, rows, fixed, split);
      INFO("H=" << width << " " << to_string(dtype) << ": split rows change " << changed << " of "
                << rows * width);
      CHECK(changed * 100 > rows * width);  // more than 1% of the outputs of the compared rows
    }
  }
}

TEST_CASE("elementwise controls: the tail is long enough for the sweep's odd width",
          "[control][elementwise]") {
  using elementwise::Variant;
  // The GPU sweep's H = 5123, a row alone: the fixed-order body stops 3 elements short, a
  // control's body 1027 elements short (5123 = 2 * 2048 + 1027).
  CHECK(5123 - elementwise::body_end(Variant::exact, 5123) == 3);
  CHECK(5123 - elementwise::body_end(Variant::tail_approx, 5123) == 1027);
  CHECK(elementwise::body_end(Variant::downcast_intermediate, 4096 * 7) ==
        4096 * 7);  // whole tiles: no tail
  // The same 1027 tail elements of one alone row, evaluated by the body (exact) and by each tail
  // formula, rounded to the io dtype: how many come out different.
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Variant tail : {Variant::tail_approx, Variant::downcast_intermediate}) {
      std::int64_t differing = 0, compared = 0;
      for (std::int64_t row = 0; row < 8; ++row) {
        const std::vector<float> x = random_row(dtype, "x", row, 5123);
        for (std::int64_t c = elementwise::body_end(tail, 5123); c < 5123; ++c) {
          const float in[3] = {4.0f * x[static_cast<std::size_t>(c)], 0.0f, 0.0f};
          float body[2] = {0, 0}, tail_out[2] = {0, 0};
          elementwise::forward(elementwise::Op::silu, Variant::exact, in, 0.0f, body);
          elementwise::forward(elementwise::Op::silu, tail, in, 0.0f, tail_out);
          differing += round_to(dtype, body[0]) != round_to(dtype, tail_out[0]);
          ++compared;
        }
      }
      INFO(to_string(dtype) << " tail variant " << static_cast<int>(tail) << ": " << differing
                            << " of " << compared);
      CHECK(differing >= 10);
    }
  }
}
