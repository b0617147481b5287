// rmsnorm: the CPU fixed-order impl passes every layout, dtype and pass; both CPU controls drift;
// the FP32 reference normalizes a known row.
#include <catch2/catch.hpp>
#include <cmath>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("rmsnorm cpu-fixed-order passes every layout", "[rmsnorm]") {
  op_test::expect_passes("rmsnorm", "cpu-fixed-order", {{"H", 1000}}, {1, 3, 16});
}

TEST_CASE("rmsnorm CPU controls drift", "[rmsnorm][control]") {
  for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      op_test::expect_drifts("rmsnorm", "cpu-split-row-small-batch", {{"H", 1000}}, dtype, pass,
                             {7, 16});
    }
    op_test::expect_drifts("rmsnorm", "cpu-dweight-tree-by-tokens", {{"H", 256}}, dtype,
                           Pass::backward, {3, 7, 16, 33});
  }
}

TEST_CASE("rmsnorm reference sanity", "[rmsnorm][reference]") {
  auto out = op_test::reference("rmsnorm", DType::fp32, Pass::forward, {{"H", 2}},
                                {{"x", tensor(DType::fp32, {1, 2}, {3.0f, 4.0f})},
                                 {"weight", tensor(DType::fp32, {1, 2}, {1.0f, 2.0f})}});
  const double rms = std::sqrt(12.5);
  CHECK(out.at("y").get(0) == Approx(3.0 / rms));
  CHECK(out.at("y").get(1) == Approx(8.0 / rms));
}
