// kernels/common/token_columns: the token-ordered column accumulation behind the RMSNorms' dweight
// and the scale op's dscale, beside its launcher.
//
// Why the order is independent of batch size, position and padding: thread c keeps accumulator[c]
// in a register and adds one token's contribution at a time in token-list order (contributions are
// computed by 32 token-warps in parallel and staged in shared memory, but added strictly in order).
// No atomics, no tree: the result equals the sequential sum over tokens, and the running value
// carries across calls.
#include <cuda_runtime.h>

#include "common/cuda_check.cuh"
#include "common/token_columns.h"
#include "common/vector_io.cuh"
#include "core/paths.h"

namespace bitcheck::cuda {
namespace {

constexpr int kColumns = 32;     // columns per block (one per lane)
constexpr int kTokenWarps = 32;  // tokens whose contributions are loaded in parallel per step

__global__ void __launch_bounds__(kColumns* kTokenWarps)
    token_column_kernel(DeviceDType dtype, const void* dy, const void* x, const void* residual,
                        const float* inverse_rms, const int32_t* tokens, int64_t token_count,
                        int64_t width, float* accumulator) {
  __shared__ float staged[kTokenWarps][kColumns];
  const int lane = threadIdx.x, warp = threadIdx.y;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColumns + lane;
  const bool active = column < width;
  float sum = (warp == 0 && active) ? accumulator[column] : 0.f;
  for (int64_t first = 0; first < token_count; first += kTokenWarps) {
    const int64_t t = first + warp;
    if (t < token_count && active) {
      const int64_t slot = tokens[t];
      const int64_t index = slot * width + column;
      float v = load_element(x, dtype, index);
      if (residual) v = round_to_dtype(dtype, __fadd_rn(v, load_element(residual, dtype, index)));
      if (inverse_rms) v = __fmul_rn(v, inverse_rms[slot]);
      staged[warp][lane] = __fmul_rn(load_element(dy, dtype, index), v);
    }
    __syncthreads();
    if (warp == 0 && active) {
      const int64_t steps = min(static_cast<int64_t>(kTokenWarps), token_count - first);
      for (int64_t i = 0; i < steps; ++i) sum = __fadd_rn(sum, staged[i][lane]);  // token order
    }
    __syncthreads();
  }
  if (warp == 0 && active) accumulator[column] = sum;
}

}  // namespace

void token_column_accumulate(DeviceDType dtype, const void* dy, const void* x, const void* residual,
                             const float* inverse_rms, const int32_t* tokens, int64_t token_count,
                             int64_t width, float* accumulator, CUstream_st* stream) {
  if (token_count == 0 || width == 0) return;
  record_path("columns.token-sequential");
  const unsigned blocks = static_cast<unsigned>((width + kColumns - 1) / kColumns);
  token_column_kernel<<<blocks, dim3(kColumns, kTokenWarps), 0, stream>>>(
      dtype, dy, x, residual, inverse_rms, tokens, token_count, width, accumulator);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
