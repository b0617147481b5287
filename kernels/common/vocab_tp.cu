// The vocabulary-parallel TP kernels beside their launchers (common/vocab_tp_kernels.h). Kernels:
//   row_max_kernel        one block per row: the row's max by ordered_max (NaN passed over, -0
//                         below +0), exact, so any split of the row gives the same value
//   combine_max_kernel    one thread per row: the ranks' maxima combined the same way
//   chunk_sums_kernel     one block per (row, chunk): the sum of exp(x - max) over one chunk of V
//   index_order_sums_kernel one thread per (row, chunk): the same sum in index order (the naive
//                         TP pair's plain sum, as its CPU twin adds)
//   target_logits_kernel  one thread per row: the target's logit where this rank holds it
//   logprob_kernel        one thread per row: (the owner's target logit - max) - log(sum)
//   dlogits_kernel        one thread per entry: dlogprob * (onehot - p), rounded once
//   widen_kernel          dtype values to fp32
//   gather_columns_kernel a block of columns of chosen rows, copied or widened
//   transpose_rows_kernel a block of rows transposed, copied or widened
//
// Why a chunk's sum does not depend on tp, the batch or the row's position: chunk g of V is the
// same entries [V * g / chunks, V * (g + 1) / chunks) whichever rank holds it, and its block adds
// them in an order fixed by the chunk's length alone: thread t sums entries t, t + 256, ... of the
// chunk in ascending order, then the 256 sums are added in one fixed pairwise tree. A row is read
// from its own packed row only, so neither the other rows nor the padding of the batch reach it.
// Every addition and product is explicitly rounded (__fadd_rn & co.): no contraction into an FMA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/dtype_dispatch.cuh"
#include "common/vocab_tp_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr int threads = 256;

cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

unsigned blocks_for(std::int64_t count) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

// The larger in the order of ordered_max (common/vocab_tp_cpu.cpp): a NaN is passed over, -0 is
// below +0.
__device__ float ordered_max(float a, float b) {
  if (isnan(b)) return a;
  if (isnan(a)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

template <typename T>
__global__ void row_max_kernel(const T* logits, std::int64_t width, float* row_max) {
  __shared__ float maxima[threads];
  const T* row = logits + blockIdx.x * width;
  float m = -INFINITY;
  for (std::int64_t i = threadIdx.x; i < width; i += threads) m = ordered_max(m, to_float(row[i]));
  maxima[threadIdx.x] = m;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      maxima[threadIdx.x] = ordered_max(maxima[threadIdx.x], maxima[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) row_max[blockIdx.x] = maxima[0];
}

__global__ void combine_max_kernel(const float* gathered, std::int64_t rows, int ranks,
                                   float* max) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float m = gathered[r];
  for (int k = 1; k < ranks; ++k) m = ordered_max(m, gathered[k * rows + r]);
  max[r] = m;
}

template <typename T>
__global__ void chunk_sums_kernel(const T* logits, std::int64_t rows, std::int64_t width,
                                  std::int64_t vocab, std::int64_t share_first, int total_chunks,
                                  int first_chunk, const float* max, float* sums) {
  __shared__ float partial[threads];
  const std::int64_t r = blockIdx.x, chunk = first_chunk + blockIdx.y;
  const std::int64_t first = vocab * chunk / total_chunks - share_first;
  const std::int64_t last = vocab * (chunk + 1) / total_chunks - share_first;
  const T* row = logits + r * width;
  const float m = max[r];
  float sum = 0.0f;
  for (std::int64_t i = first + threadIdx.x; i < last; i += threads)
    sum = __fadd_rn(sum, expf(__fsub_rn(to_float(row[i]), m)));
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.y * rows + r] = partial[0];
}

template <typename T>
__global__ void target_logits_kernel(const T* logits, std::int64_t rows, std::int64_t width,
                                     std::int64_t share_first, const std::int32_t* targets,
                                     float* target_logits) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const std::int64_t local = targets[r] - share_first;
  target_logits[r] = local >= 0 && local < width ? to_float(logits[r * width + local]) : NAN;
}

__global__ void logprob_kernel(const float* gathered_targets, const std::int32_t* targets,
                               std::int64_t rows, std::int64_t share, const float* max,
                               const float* sum, float* logprob) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float target_logit = gathered_targets[(targets[r] / share) * rows + r];
  logprob[r] = __fsub_rn(__fsub_rn(target_logit, max[r]), logf(sum[r]));
}

template <typename T>
__global__ void dlogits_kernel(const T* logits, std::int64_t rows, std::int64_t width,
                               std::int64_t share_first, const std::int32_t* targets,
                               const float* dlogprob, const float* max, const float* sum,
                               T* dlogits) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * width) return;
  const std::int64_t r = i / width, c = i % width;
  const float p = expf(__fsub_rn(__fsub_rn(to_float(logits[i]), max[r]), logf(sum[r])));
  const float onehot = share_first + c == targets[r] ? 1.0f : 0.0f;
  dlogits[i] = from_float<T>(__fmul_rn(dlogprob[r], __fsub_rn(onehot, p)));
}

// dst = src widened to fp32 (exact), or its bits copied (a NaN keeps its payload).
template <typename In, typename Out>
__device__ void copy_element(const In& src, Out& dst) {
  if constexpr (std::is_same_v<In, Out>) {
    dst = src;
  } else {
    dst = from_float<Out>(to_float(src));
  }
}

template <typename T>
__global__ void widen_kernel(const T* in, float* out, std::int64_t count) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = to_float(in[i]);
}

template <typename In, typename Out>
__global__ void gather_columns_kernel(const In* src, std::int64_t src_width,
                                      const std::int32_t* source_rows, std::int64_t rows,
                                      std::int64_t first_column, std::int64_t columns, Out* dst) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * columns) return;
  const std::int64_t r = i / columns, c = i % columns;
  const std::int64_t source = source_rows ? source_rows[r] : r;
  copy_element(src[source * src_width + first_column + c], dst[i]);
}

template <typename In, typename Out>
__global__ void transpose_rows_kernel(const In* src, std::int64_t width, std::int64_t first_row,
                                      std::int64_t count, Out* dst) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= width * count) return;
  const std::int64_t c = i / count, row = i % count;
  copy_element(src[(first_row + row) * width + c], dst[i]);
}

// The sum of exp(x - max) over one chunk of V added in index order by one thread: the naive TP
// pair's plain sum. A long chain of fp32 additions carries a rounding error of many ulps, so the
// sum over V at tp = 1 and the ranks' shares added at tp > 1 differ in logprob (fp32) by
// construction, not only where a tree's few roundings happen to reach it.
template <typename T>
__global__ void index_order_sums_kernel(const T* logits, std::int64_t rows, std::int64_t width,
                                        std::int64_t vocab, std::int64_t share_first,
                                        int total_chunks, int first_chunk, const float* max,
                                        float* sums) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const std::int64_t chunk = first_chunk + blockIdx.y;
  const std::int64_t first = vocab * chunk / total_chunks - share_first;
  const std::int64_t last = vocab * (chunk + 1) / total_chunks - share_first;
  const T* row = logits + r * width;
  const float m = max[r];
  float sum = 0.0f;
  for (std::int64_t i = first; i < last; ++i)
    sum = __fadd_rn(sum, expf(__fsub_rn(to_float(row[i]), m)));
  sums[blockIdx.y * rows + r] = sum;
}

}  // namespace

void vocab_row_max(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                   float* row_max, CUstream_st* stream) {
  if (rows == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    row_max_kernel<T><<<static_cast<unsigned>(rows), threads, 0, as_stream(stream)>>>(
        static_cast<const T*>(logits), width, row_max);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void vocab_combine_max(const float* gathered, std::int64_t rows, int ranks, float* max,
                       CUstream_st* stream) {
  if (rows == 0) return;
  combine_max_kernel<<<blocks_for(rows), threads, 0, as_stream(stream)>>>(gathered, rows, ranks,
                                                                          max);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void vocab_chunk_sums(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                      std::int64_t vocab, std::int64_t share_first, int total_chunks,
                      int first_chunk, int chunks, const float* max, bool in_index_order,
                      float* sums, CUstream_st* stream) {
  if (rows == 0) return;
  // One thread per (row, chunk) in index order, or one block per (row, chunk).
  const dim3 grid(in_index_order ? blocks_for(rows) : static_cast<unsigned>(rows),
                  static_cast<unsigned>(chunks));
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    auto* kernel = in_index_order ? index_order_sums_kernel<T> : chunk_sums_kernel<T>;
    kernel<<<grid, threads, 0, as_stream(stream)>>>(static_cast<const T*>(logits), rows, width,
                                                    vocab, share_first, total_chunks, first_chunk,
                                                    max, sums);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void vocab_target_logits(DeviceDType dtype, const void* logits, std::int64_t rows,
                         std::int64_t width, std::int64_t share_first, const std::int32_t* targets,
                         float* target_logits, CUstream_st* stream) {
  if (rows == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    target_logits_kernel<T><<<blocks_for(rows), threads, 0, as_stream(stream)>>>(
        static_cast<const T*>(logits), rows, width, share_first, targets, target_logits);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void vocab_logprob(const float* gathered_targets, const std::int32_t* targets, std::int64_t rows,
                   std::int64_t share, const float* max, const float* sum, float* logprob,
                   CUstream_st* stream) {
  if (rows == 0) return;
  logprob_kernel<<<blocks_for(rows), threads, 0, as_stream(stream)>>>(
      gathered_targets, targets, rows, share, max, sum, logprob);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void vocab_dlogits(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                   std::int64_t share_first, const std::int32_t* targets, const float* dlogprob,
                   const float* max, const float* sum, void* dlogits, CUstream_st* stream) {
  if (rows * width == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    dlogits_kernel<T><<<blocks_for(rows * width), threads, 0, as_stream(stream)>>>(
        static_cast<const T*>(logits), rows, width, share_first, targets, dlogprob, max, sum,
        static_cast<T*>(dlogits));
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void widen_to_fp32(DeviceDType dtype, const void* in, float* out, std::int64_t count,
                   CUstream_st* stream) {
  if (count == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    widen_kernel<T><<<blocks_for(count), threads, 0, as_stream(stream)>>>(static_cast<const T*>(in),
                                                                          out, count);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void gather_columns(DeviceDType dtype, bool to_fp32, const void* src, std::int64_t src_width,
                    const std::int32_t* source_rows, std::int64_t rows, std::int64_t first_column,
                    std::int64_t columns, void* dst, CUstream_st* stream) {
  if (rows * columns == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    const unsigned grid = blocks_for(rows * columns);
    if (to_fp32) {
      gather_columns_kernel<T, float><<<grid, threads, 0, as_stream(stream)>>>(
          static_cast<const T*>(src), src_width, source_rows, rows, first_column, columns,
          static_cast<float*>(dst));
    } else {
      gather_columns_kernel<T, T><<<grid, threads, 0, as_stream(stream)>>>(
          static_cast<const T*>(src), src_width, source_rows, rows, first_column, columns,
          static_cast<T*>(dst));
    }
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void transpose_rows(DeviceDType dtype, bool to_fp32, const void* src, std::int64_t width,
                    std::int64_t first_row, std::int64_t count, void* dst, CUstream_st* stream) {
  if (width * count == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    const unsigned grid = blocks_for(width * count);
    if (to_fp32) {
      transpose_rows_kernel<T, float><<<grid, threads, 0, as_stream(stream)>>>(
          static_cast<const T*>(src), width, first_row, count, static_cast<float*>(dst));
    } else {
      transpose_rows_kernel<T, T><<<grid, threads, 0, as_stream(stream)>>>(
          static_cast<const T*>(src), width, first_row, count, static_cast<T*>(dst));
    }
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
