// rmsnorm/*: launchers of the RMSNorm and fused residual-add + RMSNorm kernels (forward rows,
// backward rows); dweight's token-ordered column accumulation is common/token_columns.h.
// Plain C++ header, no CUDA headers.
#pragma once
#include <cstdint>
#include <vector>

#include "common/device_dtype.h"
#include "core/paths.h"

struct CUstream_st;

namespace bitcheck::cuda {

// One launch over the real slots `tokens[0..token_count)` of a [slots, width] batch. With
// `residual` set, the normalized row is h = dtype(x + residual) (fused add) and forward also
// writes h to `h_out`; backward adds `dh` to the row gradient and writes it to dx and dresidual.
struct RmsnormLaunch {
  DeviceDType dtype = DeviceDType::bf16;
  const void* x = nullptr;
  const void* residual = nullptr;
  const void* weight = nullptr;
  void* y = nullptr;      // forward
  void* h_out = nullptr;  // forward, fused add
  const void* dy = nullptr;
  const void* dh = nullptr;  // backward, fused add
  void* dx = nullptr;
  void* dresidual = nullptr;
  float* inverse_rms = nullptr;  // backward: written per slot, for the dweight accumulation
  const int32_t* tokens = nullptr;
  int64_t token_count = 0;
  int64_t width = 0;
  // Threads per row block of the scalar kernels and the backward rows (the fixed-order impl:
  // always rmsnorm_fixed_block_threads). With that value, no split and a width that has a forward
  // row layout (rmsnorm_forward_row_layout), forward runs that layout instead; any other value runs
  // the scalar kernels with this block size.
  int block_threads = 256;
  // Blocks per row. 1: one block reduces the whole row. A control splits each row into
  // `row_splits` column slices, one block each, whose partial sums (of v^2 and of dy * w * v) go
  // through `partials`, a workspace of token_count * row_splits * 2 elements in the io dtype, and
  // are then added in slice order.
  int row_splits = 1;
  void* partials = nullptr;
};
constexpr int rmsnorm_fixed_block_threads = 256;

// The launch paths the launchers record (core/paths.h); the control's split rows add
// "partials".
std::vector<PathDecl> rmsnorm_paths(bool control);

// The forward kernel's row layout in the fixed-order configuration, a function of the dtype and
// the width only (never of the batch): a row of `units` 16-byte units, `threads_per_row` threads
// (whole warps; thread t holds units t, t + threads_per_row, ... below `units`, at most
// `units_per_thread` of them), `rows_per_block` rows per block (several only for one-warp rows).
// threads_per_row == 0: no layout (a row that is not a whole number of 16-byte units, or longer
// than 32 warps of 4 units); forward then runs the scalar kernel.
struct RmsnormRowLayout {
  int threads_per_row = 0;
  int rows_per_block = 0;
  int units_per_thread = 0;
  int64_t units = 0;
};
RmsnormRowLayout rmsnorm_forward_row_layout(DeviceDType dtype, int64_t width);

void rmsnorm_forward(const RmsnormLaunch& launch, CUstream_st* stream);
void rmsnorm_backward_rows(const RmsnormLaunch& launch, CUstream_st* stream);

}  // namespace bitcheck::cuda
