// residual_add: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control
// drifts; the FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("residual_add cpu-fixed-order passes every layout", "[residual_add]") {
  op_test::expect_passes("residual_add", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("residual_add CPU controls drift", "[residual_add][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("residual_add", "cpu-tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("residual_add reference sanity", "[residual_add][reference]") {
  auto out = op_test::reference("residual_add", DType::bf16, Pass::forward, {{"H", 2}},
                                {{"x", tensor(DType::bf16, {1, 2}, {1.0f, -0.5f})},
                                 {"residual", tensor(DType::fp32, {1, 2}, {2.0f, 0.25f})}});
  CHECK(out.at("y").get(0) == 3.0f);
  CHECK(out.at("y").get(1) == -0.25f);
}
