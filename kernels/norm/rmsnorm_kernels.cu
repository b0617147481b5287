// norm/* kernels: RMSNorm and fused residual-add + RMSNorm (forward, backward rows) and the
// token-ordered column accumulation for dweight / dscale, each beside its launcher.
//
// Why the reduction orders are independent of batch size, position and padding:
// - Rows: one block per real token, `block_threads` threads (the fixed-order impl: always 256).
//   Thread t sums the elements of groups t, t + B, t + 2B, ... (groups of 8 when width % 8 == 0,
//   else single elements) in index order; the block then combines per-thread sums with a fixed
//   xor-shuffle tree per warp and warp 0 adds the warp sums in warp order. The order depends on
//   (width, block_threads) only. Pad slots get no block.
// - Columns (dweight, dscale): thread c keeps accumulator[c] in a register and adds one token's
//   contribution at a time in token-list order (contributions are computed by 32 token-warps in
//   parallel and staged in shared memory, but added strictly in order). No atomics, no tree: the
//   result equals the sequential sum over tokens, and the running value carries across calls.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../cuda_check.cuh"
#include "rmsnorm_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr float kEps = 1e-6f;

__device__ __forceinline__ float load(const void* base, DeviceDType dtype, int64_t index) {
  switch (dtype) {
    case DeviceDType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case DeviceDType::fp16: return __half2float(static_cast<const __half*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

__device__ __forceinline__ void store(void* base, DeviceDType dtype, int64_t index, float value) {
  switch (dtype) {
    case DeviceDType::bf16: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value); return;
    case DeviceDType::fp16: static_cast<__half*>(base)[index] = __float2half_rn(value); return;
    default: static_cast<float*>(base)[index] = value;
  }
}

__device__ __forceinline__ float round_to_dtype(DeviceDType dtype, float value) {
  switch (dtype) {
    case DeviceDType::bf16: return __bfloat162float(__float2bfloat16_rn(value));
    case DeviceDType::fp16: return __half2float(__float2half_rn(value));
    default: return value;
  }
}

// The normalized row's element: x, or dtype(x + residual) for the fused add.
__device__ __forceinline__ float row_value(const RmsnormLaunch& a, int64_t index) {
  float v = load(a.x, a.dtype, index);
  if (!a.residual) return v;
  return round_to_dtype(a.dtype, __fadd_rn(v, load(a.residual, a.dtype, index)));
}

// Block-wide sum of two values with a fixed shape: xor tree within each warp, then warp 0 adds the
// warp sums in warp order. Every thread gets the totals.
__device__ __forceinline__ float2 block_sum2(float2 v) {
  __shared__ float2 warp_sums[32];
  __shared__ float2 total;
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x = __fadd_rn(v.x, __shfl_xor_sync(0xffffffffu, v.x, offset));
    v.y = __fadd_rn(v.y, __shfl_xor_sync(0xffffffffu, v.y, offset));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float2 sum = warp_sums[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      sum.x = __fadd_rn(sum.x, warp_sums[w].x);
      sum.y = __fadd_rn(sum.y, warp_sums[w].y);
    }
    total = sum;
  }
  __syncthreads();
  return total;
}

// Per-thread partial sums in the fixed element order: (sum of v^2, sum of dy * w * v).
__device__ __forceinline__ float2 row_partials(const RmsnormLaunch& a, int64_t row, bool with_gradient) {
  const int group = a.width % 8 == 0 ? 8 : 1;
  const int64_t groups = a.width / group;
  float2 sum = make_float2(0.f, 0.f);
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    for (int j = 0; j < group; ++j) {
      const int64_t column = g * group + j;
      const float v = row_value(a, row + column);
      sum.x = __fadd_rn(sum.x, __fmul_rn(v, v));
      if (with_gradient) {
        const float gradient = __fmul_rn(load(a.dy, a.dtype, row + column), load(a.weight, a.dtype, column));
        sum.y = __fadd_rn(sum.y, __fmul_rn(gradient, v));
      }
    }
  }
  return sum;
}

__device__ __forceinline__ float inverse_rms_of(float sum_of_squares, int64_t width) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_of_squares, static_cast<float>(width)), kEps)));
}

__global__ void rmsnorm_forward_kernel(RmsnormLaunch a) {
  const int64_t row = static_cast<int64_t>(a.tokens[blockIdx.x]) * a.width;
  const float r = inverse_rms_of(block_sum2(row_partials(a, row, false)).x, a.width);
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) {
    const float v = row_value(a, row + c);
    store(a.y, a.dtype, row + c, __fmul_rn(__fmul_rn(v, r), load(a.weight, a.dtype, c)));
    if (a.h_out) store(a.h_out, a.dtype, row + c, v);
  }
}

// dx = (g - xhat * projection) * r (+ dh), g = dy * w, xhat = v * r, projection = r * sum(g v) / W.
__global__ void rmsnorm_backward_rows_kernel(RmsnormLaunch a) {
  const int64_t slot = a.tokens[blockIdx.x];
  const int64_t row = slot * a.width;
  const float2 sums = block_sum2(row_partials(a, row, true));
  const float r = inverse_rms_of(sums.x, a.width);
  const float projection = __fdiv_rn(__fmul_rn(sums.y, r), static_cast<float>(a.width));
  if (threadIdx.x == 0) a.inverse_rms[slot] = r;
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) {
    const float xhat = __fmul_rn(row_value(a, row + c), r);
    const float g = __fmul_rn(load(a.dy, a.dtype, row + c), load(a.weight, a.dtype, c));
    float value = __fmul_rn(__fsub_rn(g, __fmul_rn(xhat, projection)), r);
    if (a.dh) value = __fadd_rn(load(a.dh, a.dtype, row + c), value);
    store(a.dx, a.dtype, row + c, value);
    if (a.dresidual) store(a.dresidual, a.dtype, row + c, value);
  }
}

constexpr int kColumns = 32;     // columns per block (one per lane)
constexpr int kTokenWarps = 32;  // tokens whose contributions are loaded in parallel per step

__global__ void __launch_bounds__(kColumns * kTokenWarps)
    token_column_kernel(DeviceDType dtype, const void* dy, const void* x, const void* residual,
                        const float* inverse_rms, const int32_t* tokens, int64_t token_count, int64_t width,
                        float* accumulator) {
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
      float v = load(x, dtype, index);
      if (residual) v = round_to_dtype(dtype, __fadd_rn(v, load(residual, dtype, index)));
      if (inverse_rms) v = __fmul_rn(v, inverse_rms[slot]);
      staged[warp][lane] = __fmul_rn(load(dy, dtype, index), v);
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

void rmsnorm_forward(const RmsnormLaunch& a, CUstream_st* stream) {
  if (a.token_count == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(a.token_count), a.block_threads, 0, stream>>>(a);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward_rows(const RmsnormLaunch& a, CUstream_st* stream) {
  if (a.token_count == 0) return;
  rmsnorm_backward_rows_kernel<<<static_cast<unsigned>(a.token_count), a.block_threads, 0, stream>>>(a);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void token_column_accumulate(DeviceDType dtype, const void* dy, const void* x, const void* residual,
                             const float* inverse_rms, const int32_t* tokens, int64_t token_count,
                             int64_t width, float* accumulator, CUstream_st* stream) {
  if (token_count == 0 || width == 0) return;
  const unsigned blocks = static_cast<unsigned>((width + kColumns - 1) / kColumns);
  token_column_kernel<<<blocks, dim3(kColumns, kTokenWarps), 0, stream>>>(dtype, dy, x, residual, inverse_rms,
                                                                          tokens, token_count, width, accumulator);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
