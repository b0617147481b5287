// silu: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts; the
// FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("silu cpu-fixed-order passes every layout", "[silu]") {
  op_test::expect_passes("silu", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("silu CPU controls drift", "[silu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("silu", "cpu-tail-approx", {{"H", 1003}}, dtype, pass, {1, 3, 7, 16});
  }
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("silu", "cpu-tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("silu reference sanity", "[silu][reference]") {
  auto out = op_test::reference("silu", DType::fp32, Pass::forward, {{"H", 3}},
                                {{"x", tensor(DType::fp32, {1, 3}, {0.0f, 10.0f, -1.0f})}});
  CHECK(out.at("y").get(0) == Approx(0.0).margin(1e-6));
  CHECK(out.at("y").get(1) == Approx(9.999546).margin(1e-6));
  CHECK(out.at("y").get(2) == Approx(-0.2689414).margin(1e-6));
  auto grad = op_test::reference(
      "silu", DType::fp32, Pass::backward, {{"H", 1}},
      {{"x", tensor(DType::fp32, {1, 1}, {0.0f})}, {"dy", tensor(DType::fp32, {1, 1}, {1.0f})}});
  CHECK(grad.at("dx").get(0) == Approx(0.5));  // silu'(0) = 1/2
}
