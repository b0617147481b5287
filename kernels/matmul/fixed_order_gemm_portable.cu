// matmul/fixed-order's portable half (see the top of fixed_order_gemm.cu for why each output's
// reduction order is independent of the batch): the fp32-FMA GEMM that fp32 and GPUs before sm_90
// take (and the wgmma path's fallback where its TMA maps cannot take a shape), and the
// token-sequential dW accumulation of every dtype. Kernels first, then their launchers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "fixed_order_gemm.h"
#include "fixed_order_gemm_internal.h"

namespace bitcheck::cuda {
namespace {

// ------------------------------------------------------------------------------------------------
// Portable path: 64x64 tile per 256-thread block, 4x4 outputs per thread, 16-wide K slices staged
// through shared memory as fp32. Each output is one fmaf chain over k = 0..K-1.
// ------------------------------------------------------------------------------------------------
constexpr int kPortableTile = 64;
constexpr int kPortableK = 16;

// X and W rows lie ldx and ldw elements apart; Out is T, or float for the unrounded accumulators.
template <typename T, typename Out>
__global__ void __launch_bounds__(256)
    portable_gemm_kernel(const T* x, int64_t ldx, const T* w, int64_t ldw, Out* y, int64_t M,
                         int64_t N, int64_t K) {
  __shared__ float x_tile[kPortableK][kPortableTile + 4];
  __shared__ float w_tile[kPortableK][kPortableTile + 4];
  const int tx = threadIdx.x % 16;  // column group
  const int ty = threadIdx.x / 16;  // row group
  const int64_t row_base = static_cast<int64_t>(blockIdx.y) * kPortableTile;
  const int64_t col_base = static_cast<int64_t>(blockIdx.x) * kPortableTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kPortableK) {
    for (int i = threadIdx.x; i < kPortableTile * kPortableK; i += blockDim.x) {
      const int r = i / kPortableK;
      const int kk = i % kPortableK;
      const int64_t k = k0 + kk;
      const int64_t xr = row_base + r;
      const int64_t wr = col_base + r;
      x_tile[kk][r] = (xr < M && k < K) ? to_float(x[xr * ldx + k]) : 0.0f;
      w_tile[kk][r] = (wr < N && k < K) ? to_float(w[wr * ldw + k]) : 0.0f;
    }
    __syncthreads();
    const int k_count = static_cast<int>(K - k0 < kPortableK ? K - k0 : kPortableK);
    for (int kk = 0; kk < k_count; ++kk) {
      float xv[4];
      float wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = x_tile[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = w_tile[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row_base + ty + 16 * i;
    if (row >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col_base + tx + 16 * j;
      if (col < N) y[row * N + col] = from_float<Out>(acc[i][j]);
    }
  }
}

// dW[n,k] += Σ_t dy[t,n]·x[t,k], t ascending, one fmaf per token. 64x64 dW tile per block, 4x4
// per thread, 16 tokens at a time staged in shared memory (staging does not reorder the chain).
template <typename T>
__global__ void __launch_bounds__(256) dw_accumulate_kernel(const T* dy, const T* x, float* dw,
                                                            int64_t T_count, int64_t N, int64_t K) {
  __shared__ float dy_tile[kPortableK][kPortableTile];
  __shared__ float x_tile[kPortableK][kPortableTile];
  const int tx = threadIdx.x % 16;  // k group
  const int ty = threadIdx.x / 16;  // n group
  const int64_t n_base = static_cast<int64_t>(blockIdx.y) * kPortableTile;
  const int64_t k_base = static_cast<int64_t>(blockIdx.x) * kPortableTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n_base + ty + 16 * i;
      const int64_t k = k_base + tx + 16 * j;
      acc[i][j] = (n < N && k < K) ? dw[n * K + k] : 0.0f;
    }
  for (int64_t t0 = 0; t0 < T_count; t0 += kPortableK) {
    for (int i = threadIdx.x; i < kPortableTile * kPortableK; i += blockDim.x) {
      const int tt = i / kPortableTile;
      const int c = i % kPortableTile;
      const int64_t t = t0 + tt;
      dy_tile[tt][c] = (t < T_count && n_base + c < N) ? to_float(dy[t * N + n_base + c]) : 0.0f;
      x_tile[tt][c] = (t < T_count && k_base + c < K) ? to_float(x[t * K + k_base + c]) : 0.0f;
    }
    __syncthreads();
    const int t_count = static_cast<int>(T_count - t0 < kPortableK ? T_count - t0 : kPortableK);
    for (int tt = 0; tt < t_count; ++tt) {
      float dyv[4];
      float xv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) dyv[i] = dy_tile[tt][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = x_tile[tt][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(dyv[i], xv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n_base + ty + 16 * i;
      const int64_t k = k_base + tx + 16 * j;
      if (n < N && k < K) dw[n * K + k] = acc[i][j];
    }
}

template <typename T, typename Out>
void launch_portable_of(const void* x, int64_t ldx, const void* w, int64_t ldw, void* y, int64_t M,
                        int64_t N, int64_t K, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((N + kPortableTile - 1) / kPortableTile),
                  static_cast<unsigned>((M + kPortableTile - 1) / kPortableTile));
  portable_gemm_kernel<T, Out><<<grid, 256, 0, stream>>>(
      static_cast<const T*>(x), ldx, static_cast<const T*>(w), ldw, static_cast<Out*>(y), M, N, K);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_portable_to(bool float_out, const void* x, int64_t ldx, const void* w, int64_t ldw,
                        void* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (float_out) return launch_portable_of<T, float>(x, ldx, w, ldw, y, M, N, K, stream);
  launch_portable_of<T, T>(x, ldx, w, ldw, y, M, N, K, stream);
}

}  // namespace

namespace fixed_order_internal {
void launch_portable(GemmDType dtype, const void* x, int64_t ldx, const void* w, int64_t ldw,
                     void* y, bool float_out, int64_t M, int64_t N, int64_t K,
                     cudaStream_t stream) {
  switch (dtype) {
    case GemmDType::bf16:
      return launch_portable_to<__nv_bfloat16>(float_out, x, ldx, w, ldw, y, M, N, K, stream);
    case GemmDType::fp16:
      return launch_portable_to<__half>(float_out, x, ldx, w, ldw, y, M, N, K, stream);
    case GemmDType::fp32:
      return launch_portable_to<float>(float_out, x, ldx, w, ldw, y, M, N, K, stream);
  }
}
}  // namespace fixed_order_internal

using fixed_order_internal::as_stream;
using fixed_order_internal::check_shape;
using fixed_order_internal::launch_portable;

namespace detail {
void fixed_order_gemm_portable(GemmDType dtype, const void* x, const void* w, void* y, int64_t M,
                               int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_portable", x, w, y, M, N, K);
  launch_portable(dtype, x, K, w, K, y, false, M, N, K, as_stream(stream));
}
}  // namespace detail

void fixed_order_gemm_dw_accumulate(GemmDType dtype, const void* dy, const void* x, float* dw,
                                    int64_t T, int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_dw_accumulate", dy, x, dw, T, N, K);
  record_path("dw.token-sequential");
  const dim3 grid(static_cast<unsigned>((K + kPortableTile - 1) / kPortableTile),
                  static_cast<unsigned>((N + kPortableTile - 1) / kPortableTile));
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case GemmDType::bf16:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(dy),
                                                static_cast<const __nv_bfloat16*>(x), dw, T, N, K);
      break;
    case GemmDType::fp16:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const __half*>(dy),
                                                static_cast<const __half*>(x), dw, T, N, K);
      break;
    case GemmDType::fp32:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const float*>(dy),
                                                static_cast<const float*>(x), dw, T, N, K);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
