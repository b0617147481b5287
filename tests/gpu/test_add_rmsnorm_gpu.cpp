// add_rmsnorm on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass;
// the CUDA control drifts.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("add_rmsnorm cuda fixed-order passes every layout", "[gpu][add_rmsnorm]") {
  op_test::expect_passes("add_rmsnorm", "fixed-order", {{"H", 1000}}, {1, 3, 33, 300});
}

// The fused add on the forward row layouts (see test_rmsnorm_gpu.cpp): one-warp rows (8, 264),
// several warps a row (2048, 5120, 8192), four units a thread (32768 in bf16/fp16), each row alone
// against the same row in a batch of 300, y and h, in every dtype.
TEST_CASE("add_rmsnorm cuda fixed-order forward passes on every row layout", "[gpu][add_rmsnorm]") {
  for (std::int64_t width : {8, 264, 2048, 5120, 8192, 32768}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
      for (std::int64_t rows : {1, 300}) {
        CaseResult result = op_test::run(op_test::make_case("add_rmsnorm", "fixed-order", dtype,
                                                            Pass::forward, {{"H", width}}, rows));
        INFO("H=" << width << " " << to_string(dtype) << " M=" << rows << ": "
                  << op_test::describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("add_rmsnorm cuda block-size-by-tokens drifts", "[gpu][add_rmsnorm][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("add_rmsnorm", "block-size-by-tokens", {{"H", 1024}}, dtype, pass,
                             {300});
  }
}
