// gelu_erf on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("gelu_erf cuda fixed-order passes every layout", "[gpu][gelu_erf]") {
  op_test::expect_passes("gelu_erf", "fixed-order", {{"H", 1003}}, {1, 3, 33});
}

TEST_CASE("gelu_erf cuda tail-approx drifts", "[gpu][gelu_erf][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("gelu_erf", "tail-approx", {{"H", 1003}}, dtype, pass, {1, 3, 7, 16});
  }
}

TEST_CASE("gelu_erf cuda tail-downcast-bf16 drifts", "[gpu][gelu_erf][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("gelu_erf", "tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}
