// add_rmsnorm: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control
// drifts; the FP32 reference agrees with known values.
#include <catch2/catch.hpp>
#include <cmath>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("add_rmsnorm cpu-fixed-order passes every layout", "[add_rmsnorm]") {
  op_test::expect_passes("add_rmsnorm", "cpu-fixed-order", {{"H", 1000}}, {1, 3, 16});
}

TEST_CASE("add_rmsnorm CPU controls drift", "[add_rmsnorm][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("add_rmsnorm", "cpu-split-row-small-batch", {{"H", 1000}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("add_rmsnorm reference sanity", "[add_rmsnorm][reference]") {
  // With weight 1 and x + residual = (3, 4) ... rows of constant magnitude: y = h / rms(h).
  auto out = op_test::reference("add_rmsnorm", DType::fp32, Pass::forward, {{"H", 2}},
                                {{"x", tensor(DType::fp32, {1, 2}, {1.0f, 1.0f})},
                                 {"residual", tensor(DType::fp32, {1, 2}, {2.0f, 3.0f})},
                                 {"weight", tensor(DType::fp32, {1, 2}, {1.0f, 1.0f})}});
  CHECK(out.at("h").get(0) == 3.0f);
  CHECK(out.at("h").get(1) == 4.0f);
  const double rms = std::sqrt((9.0 + 16.0) / 2.0);
  CHECK(out.at("y").get(0) == Approx(3.0 / rms));
  CHECK(out.at("y").get(1) == Approx(4.0 / rms));
}

TEST_CASE("add_rmsnorm dweight tree control drifts in backward", "[add_rmsnorm][control]") {
  for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
    op_test::expect_drifts("add_rmsnorm", "cpu-dweight-tree-by-tokens", {{"H", 256}}, dtype,
                           Pass::backward, {3, 7, 16, 33});
  }
}
