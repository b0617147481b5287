// silu on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("silu cuda fixed-order passes every layout", "[gpu][silu]") {
  op_test::expect_passes("silu", "fixed-order", {{"H", 1003}}, {1, 3, 33});
}

TEST_CASE("silu cuda tail-approx drifts", "[gpu][silu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("silu", "tail-approx", {{"H", 1003}}, dtype, pass, {1, 3, 7, 16});
    // The GPU sweep's odd width, where this control lost sight in bf16 and fp16 with an 8-element
    // tail.
    for (DType dtype : {DType::bf16, DType::fp16})
      op_test::expect_drifts("silu", "tail-approx", {{"H", 5123}}, dtype, pass, {1, 33});
  }
}

TEST_CASE("silu cuda tail-downcast-bf16 drifts", "[gpu][silu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("silu", "tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}
