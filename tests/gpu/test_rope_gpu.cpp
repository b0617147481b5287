// rope on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("rope cuda fixed-order passes every layout", "[gpu][rope]") {
  op_test::expect_passes("rope", "fixed-order", {{"heads", 3}, {"head_dim", 32}, {"rotary_dim", 16}, {"style", 2}}, {1, 3, 33});
}

TEST_CASE("rope cuda chunk-relative-angle drifts", "[gpu][rope][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) op_test::expect_drifts("rope", "chunk-relative-angle", {{"heads", 2}, {"head_dim", 64}, {"rotary_dim", 64}, {"style", 1}}, dtype, pass, {3, 16});
  }
}

TEST_CASE("rope cuda fixed-order passes with NeoX pairing", "[gpu][rope]") {
  op_test::expect_passes("rope", "fixed-order", {{"heads", 2}, {"head_dim", 64}, {"rotary_dim", 64}, {"style", 1}}, {7, 64});
}
