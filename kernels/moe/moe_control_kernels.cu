// moe control kernels beside their launchers: the failures the CUDA controls are built on. Each
// depends on the batch by construction, which is the point: a control that did not drift would
// mean the harness lost its sight.
//
//   combine_atomic_control_kernel   atomicAdd of one expert's weighted rows onto the dtype output;
//                                   launched once per expert in the schedule's order, so a token's
//                                   results arrive in the order its experts are scheduled
//   add_rows_kernel                 out = dtype(out + term) (the router's term after that combine)
//   dw_chunk_atomic_control_kernel  dW partials over 32 consecutive rows of an expert's list, from
//                                   zero, added to dW by atomicAdd: the chunks follow the expert's
//                                   tokens in this batch, and the additions the blocks' finish
//   mask_columns_kernel             a copy with the columns outside one K slice zeroed, so the
//                                   fixed-order GEMM computes that slice's partial (split-K)
//   sum_partials_kernel             the split-K partials added in order in the dtype
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "moe/moe_kernels.h"
#include "moe/moe_launch.cuh"

namespace bitcheck::cuda {
namespace {

using namespace moe_launch;  // kThreads, blocks_for, as_stream, with_type

constexpr int kDwTile = 64;    // dW tile per block: 64 x 64, 4 x 4 per thread
constexpr int kDwChunk = 32;   // rows (tokens) per partial
constexpr int kDwStaged = 16;  // rows staged in shared memory at a time

template <typename T>
__global__ void __launch_bounds__(kThreads)
    combine_atomic_control_kernel(const T* rows, const std::int32_t* entries, std::int64_t first,
                                  std::int64_t count, const float* weights, int topk,
                                  std::int64_t hidden, T* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count * hidden) return;
  const std::int64_t p = first + i / hidden, h = i % hidden;
  const std::int32_t pair = entries[p];
  T value = rows[p * hidden + h];
  if (weights) value = from_float<T>(__fmul_rn(weights[pair], to_float(value)));
  atomicAdd(out + static_cast<std::int64_t>(pair / topk) * hidden + h, value);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_rows_kernel(const T* term, std::int64_t count, T* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  out[i] = from_float<T>(__fadd_rn(to_float(out[i]), to_float(term[i])));
}

// Block (k tile, n tile, chunk): the chunk's rows summed from zero in row order, one fmaf each,
// then one atomicAdd per element into dw.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    dw_chunk_atomic_control_kernel(const T* dy, const T* x, float* dw, std::int64_t tokens,
                                   std::int64_t n_count, std::int64_t k_count) {
  __shared__ float dy_tile[kDwStaged][kDwTile];
  __shared__ float x_tile[kDwStaged][kDwTile];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t k_base = static_cast<std::int64_t>(blockIdx.x) * kDwTile;
  const std::int64_t n_base = static_cast<std::int64_t>(blockIdx.y) * kDwTile;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.z) * kDwChunk;
  const std::int64_t last = first + kDwChunk < tokens ? first + kDwChunk : tokens;
  float acc[4][4] = {};
  for (std::int64_t t0 = first; t0 < last; t0 += kDwStaged) {
    for (int i = threadIdx.x; i < kDwTile * kDwStaged; i += kThreads) {
      const int row = i / kDwTile, column = i % kDwTile;
      const std::int64_t t = t0 + row;
      dy_tile[row][column] =
          t < last && n_base + column < n_count ? to_float(dy[t * n_count + n_base + column]) : 0.f;
      x_tile[row][column] =
          t < last && k_base + column < k_count ? to_float(x[t * k_count + k_base + column]) : 0.f;
    }
    __syncthreads();
    const std::int64_t staged = last - t0 < kDwStaged ? last - t0 : kDwStaged;
    for (int row = 0; row < staged; ++row) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(dy_tile[row][ty + 16 * i], x_tile[row][tx + 16 * j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = n_base + ty + 16 * i, k = k_base + tx + 16 * j;
      if (n < n_count && k < k_count) atomicAdd(dw + n * k_count + k, acc[i][j]);
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    mask_columns_kernel(const T* in, std::int64_t rows, std::int64_t cols, std::int64_t first,
                        std::int64_t last, T* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * cols) return;
  const std::int64_t column = i % cols;
  out[i] = column >= first && column < last ? in[i] : from_float<T>(0.0f);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(const T* partials, int parts, std::int64_t count, T* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  T sum = from_float<T>(0.0f);
  for (int part = 0; part < parts; ++part)
    sum = from_float<T>(__fadd_rn(to_float(sum), to_float(partials[part * count + i])));
  out[i] = sum;
}

}  // namespace

void moe_combine_atomic_control(DeviceDType dtype, const void* rows, const std::int32_t* entries,
                                std::int64_t first, std::int64_t count, const float* weights,
                                int topk, std::int64_t hidden, void* out, CUstream_st* stream) {
  if (count == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    combine_atomic_control_kernel<<<blocks_for(count * hidden), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(rows), entries, first, count, weights, topk, hidden,
        static_cast<T*>(out));
  });
}

void moe_add_rows(DeviceDType dtype, const void* term, std::int64_t count, void* out,
                  CUstream_st* stream) {
  if (count == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    add_rows_kernel<<<blocks_for(count), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(term), count, static_cast<T*>(out));
  });
}

void moe_dw_atomic_control(DeviceDType dtype, const void* dy, const void* x, float* dw,
                           std::int64_t tokens, std::int64_t n, std::int64_t k,
                           CUstream_st* stream) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>((k + kDwTile - 1) / kDwTile),
                  static_cast<unsigned>((n + kDwTile - 1) / kDwTile),
                  static_cast<unsigned>((tokens + kDwChunk - 1) / kDwChunk));
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    dw_chunk_atomic_control_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), dw, tokens, n, k);
  });
}

void moe_mask_columns(DeviceDType dtype, const void* in, std::int64_t rows, std::int64_t cols,
                      std::int64_t first, std::int64_t last, void* out, CUstream_st* stream) {
  if (rows * cols == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    mask_columns_kernel<<<blocks_for(rows * cols), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(in), rows, cols, first, last, static_cast<T*>(out));
  });
}

void moe_sum_partials(DeviceDType dtype, const void* partials, int parts, std::int64_t count,
                      void* out, CUstream_st* stream) {
  if (count == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    sum_partials_kernel<<<blocks_for(count), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(partials), parts, count, static_cast<T*>(out));
  });
}

}  // namespace bitcheck::cuda
