// rmsnorm on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass; the
// CUDA control drifts.
#include <catch2/catch.hpp>

#include "rmsnorm/rmsnorm_kernels.h"
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

// The forward row layouts (kernels/rmsnorm/rmsnorm_kernels.cu, rmsnorm_forward_row_layout), each
// row alone against the same row in a batch of 300 (and every other layout), in every dtype:
// one-warp rows, four a block (H 8: one 16-byte unit in bf16/fp16, 31 idle lanes; 264: 33 units,
// lane 0 holds two; in fp32 66 units over two warps), several warps a row, one row a block (2048,
// 4096, 5120 = 10 warps, 8192, 16384 = 32 warps), four units a thread (32768 in bf16/fp16; too wide
// for fp32, which takes the scalar kernel), and 1004 (whole 16-byte units in fp32 only; bf16/fp16
// take the scalar kernel).
TEST_CASE("rmsnorm cuda fixed-order forward passes on every row layout", "[gpu][rmsnorm]") {
  for (std::int64_t width : {8, 264, 1004, 2048, 4096, 5120, 8192, 16384, 32768}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
      for (std::int64_t rows : {1, 300}) {
        CaseResult result = op_test::run(op_test::make_case("rmsnorm", "fixed-order", dtype,
                                                            Pass::forward, {{"H", width}}, rows));
        INFO("H=" << width << " " << to_string(dtype) << " M=" << rows << ": "
                  << op_test::describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("rmsnorm cuda block-size-by-tokens drifts", "[gpu][rmsnorm][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("rmsnorm", "block-size-by-tokens", {{"H", 1024}}, dtype, pass, {300});
  }
}

// The forward row layout is a function of (dtype, width) only (host code: the launch takes it as
// is, whatever the token count). The memory-bound bench widths get whole warps of two 16-byte
// units a thread, one row a block.
TEST_CASE("rmsnorm cuda forward row layout by width", "[gpu][rmsnorm]") {
  using cuda::DeviceDType;
  struct Expected {
    DeviceDType dtype;
    std::int64_t width;
    int threads_per_row, rows_per_block, units_per_thread;
  };
  for (const Expected& e :
       {Expected{DeviceDType::bf16, 2048, 128, 1, 2}, Expected{DeviceDType::bf16, 4096, 256, 1, 2},
        Expected{DeviceDType::bf16, 5120, 320, 1, 2}, Expected{DeviceDType::bf16, 8192, 512, 1, 2},
        Expected{DeviceDType::fp16, 16384, 1024, 1, 2},
        Expected{DeviceDType::bf16, 32768, 1024, 1, 4},
        Expected{DeviceDType::fp32, 4096, 512, 1, 2}, Expected{DeviceDType::bf16, 264, 32, 4, 2},
        Expected{DeviceDType::bf16, 8, 32, 4, 1}, Expected{DeviceDType::fp32, 1004, 128, 1, 2}}) {
    const cuda::RmsnormRowLayout layout = cuda::rmsnorm_forward_row_layout(e.dtype, e.width);
    INFO("width " << e.width);
    CHECK(layout.threads_per_row == e.threads_per_row);
    CHECK(layout.rows_per_block == e.rows_per_block);
    CHECK(layout.units_per_thread == e.units_per_thread);
  }
  CHECK(cuda::rmsnorm_forward_row_layout(DeviceDType::bf16, 1004).threads_per_row ==
        0);  // not whole 16-byte units
  CHECK(cuda::rmsnorm_forward_row_layout(DeviceDType::fp32, 32768).threads_per_row ==
        0);  // wider than 32 warps of 4 units
  CHECK(cuda::rmsnorm_forward_row_layout(DeviceDType::bf16, 65536).threads_per_row == 0);
}
