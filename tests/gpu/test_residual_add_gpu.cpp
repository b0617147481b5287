// residual_add on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass;
// the CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("residual_add cuda fixed-order passes every layout", "[gpu][residual_add]") {
  op_test::expect_passes("residual_add", "fixed-order", {{"H", 1003}}, {1, 3, 33});
}

TEST_CASE("residual_add cuda tail-downcast-bf16 drifts", "[gpu][residual_add][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("residual_add", "tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}
