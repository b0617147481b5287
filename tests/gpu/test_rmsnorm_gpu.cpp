// rmsnorm on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("rmsnorm cuda fixed-order passes every layout", "[gpu][rmsnorm]") {
  op_test::expect_passes("rmsnorm", "fixed-order", {{"H", 1000}}, {1, 3, 33, 300});
}

// Widths for each register-resident vector kernel (1, 2, 4 and 8 groups of 8 per thread; 16384
// backward falls back to the scalar kernel) and a width that is not a multiple of 8 (scalar).
TEST_CASE("rmsnorm cuda fixed-order passes on the vector and scalar paths", "[gpu][rmsnorm]") {
  for (std::int64_t width : {2048, 5120, 8192, 16384, 1003}) {
    op_test::expect_passes("rmsnorm", "fixed-order", {{"H", width}}, {1, 33});
  }
}

TEST_CASE("rmsnorm cuda block-size-by-tokens drifts", "[gpu][rmsnorm][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) op_test::expect_drifts("rmsnorm", "block-size-by-tokens", {{"H", 1024}}, dtype, pass, {300});
  }
}
