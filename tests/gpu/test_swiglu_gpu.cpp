// swiglu on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("swiglu cuda fixed-order passes every layout", "[gpu][swiglu]") {
  op_test::expect_passes("swiglu", "fixed-order", {{"H", 1003}}, {1, 3, 33});
}

TEST_CASE("swiglu cuda tail-approx drifts", "[gpu][swiglu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("swiglu", "tail-approx", {{"H", 1003}}, dtype, pass, {1, 3, 7, 16});
    // The GPU sweep's odd width, where this control lost sight in bf16 and fp16 with an 8-element
    // tail.
    for (DType dtype : {DType::bf16, DType::fp16})
      op_test::expect_drifts("swiglu", "tail-approx", {{"H", 5123}}, dtype, pass, {1, 33});
  }
}

TEST_CASE("swiglu cuda tail-downcast-bf16 drifts", "[gpu][swiglu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("swiglu", "tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}
