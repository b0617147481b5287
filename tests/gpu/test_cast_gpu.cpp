// cast on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("cast cuda fixed-order passes every layout", "[gpu][cast]") {
  op_test::expect_passes("cast", "fixed-order", {{"H", 1003}}, {1, 3, 33});
}

TEST_CASE("cast cuda tail-round-toward-zero drifts", "[gpu][cast][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp16})
      op_test::expect_drifts("cast", "tail-round-toward-zero", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}
