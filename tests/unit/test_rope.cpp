// rope: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts; the
// FP32 reference agrees with known values.
#include <catch2/catch.hpp>
#include <cmath>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("rope cpu-fixed-order passes every layout", "[rope]") {
  op_test::expect_passes("rope", "cpu-fixed-order",
                         {{"heads", 3}, {"head_dim", 32}, {"rotary_dim", 16}, {"style", 2}},
                         {1, 3, 16});
}

TEST_CASE("rope CPU controls drift", "[rope][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("rope", "cpu-chunk-relative-angle",
                             {{"heads", 3}, {"head_dim", 32}, {"rotary_dim", 16}, {"style", 2}},
                             dtype, pass, {1, 3, 7, 16});
  }
}

TEST_CASE("rope reference sanity", "[rope][reference]") {
  // Position 0 is the identity, in both pairings and both passes.
  for (std::int64_t style : {1, 2}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      Dims dims = {{"heads", 1}, {"head_dim", 4}, {"rotary_dim", 4}, {"style", style}};
      Tensor positions(DType::i32, {1, 1});
      positions.set_int(0, 0);
      const char* in = pass == Pass::forward ? "x" : "dy";
      auto out = op_test::reference("rope", DType::fp32, pass, dims,
                                    {{in, tensor(DType::fp32, {1, 4}, {0.5f, -0.25f, 0.75f, 1.0f})},
                                     {"positions", positions}});
      const Tensor& y = out.at(pass == Pass::forward ? "y" : "dx");
      CHECK(y.get(0) == 0.5f);
      CHECK(y.get(1) == -0.25f);
      CHECK(y.get(2) == 0.75f);
      CHECK(y.get(3) == 1.0f);
    }
  }
  // Pair 0 turns by exactly `position` radians (inv_freq[0] = 1); NeoX pairs element 0 with R/2.
  Tensor positions(DType::i32, {1, 1});
  positions.set_int(0, 1);
  auto out = op_test::reference(
      "rope", DType::fp32, Pass::forward,
      {{"heads", 1}, {"head_dim", 4}, {"rotary_dim", 4}, {"style", 1}},
      {{"x", tensor(DType::fp32, {1, 4}, {1.0f, 0.0f, 0.0f, 0.0f})}, {"positions", positions}});
  CHECK(out.at("y").get(0) == Approx(std::cos(1.0)));
  CHECK(out.at("y").get(2) == Approx(std::sin(1.0)));
}

TEST_CASE("rope cpu-fixed-order passes with NeoX pairing and full rotary dim", "[rope]") {
  op_test::expect_passes("rope", "cpu-fixed-order",
                         {{"heads", 2}, {"head_dim", 64}, {"rotary_dim", 64}, {"style", 1}}, {7});
}
