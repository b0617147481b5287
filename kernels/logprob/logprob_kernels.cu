// logprob kernels beside their launchers: per-piece softmax partials, the ordered merge with the
// target gather, and the dlogits kernel.
//
// Why the fixed-order reduction is independent of batch, position and padding: a row is cut into
// pieces of logprob_chunk (4096) entries, a constant. One block of 256 threads reduces one piece:
// thread t folds entries t*8 + k*2048 (k ascending) into an online (max, sum of exp) pair in a
// fixed order, the 32 lanes of a warp are combined by a fixed xor-butterfly and the 8 warps by
// warp 0 in warp order. The pieces' (max, sum) pairs are then merged by one thread per row in
// piece order. Every step depends on the piece index and the lane only; the batch decides only
// how many blocks exist (grid.y = rows), never how a row is split or combined, and pad slots are
// never read (rows come from an index list).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>

#include "../cuda_check.cuh"
#include "logprob_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVector =
    8;  // entries per thread per step: one 16-byte load of bf16/fp16, two of fp32

cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

__device__ inline float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ inline float to_float(__half v) {
  return __half2float(v);
}
__device__ inline float to_float(float v) {
  return v;
}
template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}

// 8 consecutive entries starting at `p`; vectorized when `aligned` (the row and piece starts are
// multiples of 8 entries), element by element otherwise.
template <typename T>
__device__ inline void load8(const T* p, bool aligned, std::int64_t valid, float (&out)[kVector]) {
  if (aligned && valid >= kVector) {
    T values[kVector];
    if constexpr (sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(values) = *reinterpret_cast<const uint4*>(p);
    } else {
      reinterpret_cast<uint4*>(values)[0] = reinterpret_cast<const uint4*>(p)[0];
      reinterpret_cast<uint4*>(values)[1] = reinterpret_cast<const uint4*>(p)[1];
    }
    for (int j = 0; j < kVector; ++j) out[j] = to_float(values[j]);
    return;
  }
  for (int j = 0; j < kVector; ++j) out[j] = j < valid ? to_float(p[j]) : -INFINITY;
}

struct Partial {
  float max;
  float sum;
};

__device__ inline Partial merge(Partial a, Partial b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// grid = (pieces, rows). Writes (max, sum) of piece blockIdx.x of row blockIdx.y.
template <typename T>
__global__ void partials_kernel(const T* logits, const std::int32_t* in_rows, std::int64_t vocab,
                                std::int64_t piece, bool aligned, float* partials) {
  const std::int64_t row = in_rows[blockIdx.y];
  const std::int64_t first = blockIdx.x * piece;
  const std::int64_t last = first + piece < vocab ? first + piece : vocab;
  const T* base = logits + row * vocab;
  Partial own = {-INFINITY, 0.0f};
  for (std::int64_t i = first + threadIdx.x * kVector; i < last; i += kThreads * kVector) {
    float x[kVector];
    load8(base + i, aligned, last - i, x);
    for (int j = 0; j < kVector; ++j) {  // online: one exp per entry, in entry order
      if (x[j] > own.max) {
        own.sum = own.sum * expf(own.max - x[j]) + 1.0f;
        own.max = x[j];
      } else if (x[j] != -INFINITY) {
        own.sum += expf(x[j] - own.max);
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {  // fixed butterfly over the lanes
    Partial other = {__shfl_xor_sync(0xffffffffu, own.max, offset),
                     __shfl_xor_sync(0xffffffffu, own.sum, offset)};
    own = (threadIdx.x & offset) ? merge(other, own) : merge(own, other);
  }
  __shared__ Partial warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = own;
  __syncthreads();
  if (threadIdx.x != 0) return;
  Partial total = warps[0];
  for (int w = 1; w < kThreads / 32; ++w) total = merge(total, warps[w]);
  float* out = partials + (static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * 2;
  out[0] = total.max;
  out[1] = total.sum;
}

// One thread per row: merges the row's pieces in order (or last to first), gathers the target.
template <typename T>
__global__ void merge_kernel(const T* logits, const std::int32_t* targets,
                             const std::int32_t* in_rows, const std::int32_t* out_rows,
                             std::int64_t rows, std::int64_t vocab, std::int64_t pieces,
                             bool reverse_merge, const float* partials, float* lse, float* logprob,
                             std::uint64_t* error_record) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float* own = partials + r * pieces * 2;
  const std::int64_t start = reverse_merge ? pieces - 1 : 0, step = reverse_merge ? -1 : 1;
  Partial total = {own[start * 2], own[start * 2 + 1]};
  for (std::int64_t k = 1; k < pieces; ++k) {
    const std::int64_t p = start + k * step;
    total = merge(total, {own[p * 2], own[p * 2 + 1]});
  }
  const float row_lse = total.max + logf(total.sum);
  lse[r] = row_lse;
  if (!logprob) return;
  const std::int64_t slot = in_rows[r];
  const std::int32_t target = targets[slot];
  if (target < 0 || target >= vocab) {
    *error_record = (static_cast<std::uint64_t>(slot) << 32) | static_cast<std::uint32_t>(target);
    return;
  }
  logprob[out_rows[r]] = to_float(logits[slot * vocab + target]) - row_lse;
}

// grid = (pieces, rows): dlogits of piece blockIdx.x of row blockIdx.y; elementwise, no reduction.
template <typename T>
__global__ void dlogits_kernel(const T* logits, const std::int32_t* targets, const float* dlogprob,
                               const std::int32_t* in_rows, const std::int32_t* out_rows,
                               std::int64_t vocab, std::int64_t piece, bool aligned,
                               const float* lse, T* dlogits, std::uint64_t* error_record) {
  const std::int64_t slot = in_rows[blockIdx.y];
  const std::int32_t target = targets[slot];
  if (target < 0 || target >= vocab) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
      *error_record = (static_cast<std::uint64_t>(slot) << 32) | static_cast<std::uint32_t>(target);
    }
    return;
  }
  const float row_lse = lse[blockIdx.y], upstream = dlogprob[slot];
  const std::int64_t first = blockIdx.x * piece;
  const std::int64_t last = first + piece < vocab ? first + piece : vocab;
  const T* in = logits + slot * vocab;
  T* out = dlogits + static_cast<std::int64_t>(out_rows[blockIdx.y]) * vocab;
  for (std::int64_t i = first + threadIdx.x * kVector; i < last; i += kThreads * kVector) {
    float x[kVector];
    load8(in + i, aligned, last - i, x);
    T values[kVector];
    for (int j = 0; j < kVector; ++j) {
      const float onehot = i + j == target ? 1.0f : 0.0f;
      values[j] = from_float<T>(upstream * (onehot - expf(x[j] - row_lse)));
    }
    if (aligned && last - i >= kVector) {
      if constexpr (sizeof(T) == 2) {
        *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(values);
      } else {
        reinterpret_cast<uint4*>(out + i)[0] = reinterpret_cast<const uint4*>(values)[0];
        reinterpret_cast<uint4*>(out + i)[1] = reinterpret_cast<const uint4*>(values)[1];
      }
    } else {
      for (int j = 0; j < kVector && i + j < last; ++j) out[i + j] = values[j];
    }
  }
}

std::int64_t piece_count(std::int64_t vocab, const LogprobSplit& split) {
  return (vocab + split.piece - 1) / split.piece;
}

void check_call(std::int64_t rows, std::int64_t vocab, const LogprobSplit& split) {
  if (rows < 0 || vocab < 1)
    throw std::invalid_argument("logprob: rows >= 0 and vocab >= 1 required");
  if (split.piece < kVector || split.piece % kVector != 0)
    throw std::invalid_argument("logprob: piece must be a multiple of 8");
  if (rows > 65535) throw std::invalid_argument("logprob: at most 65535 rows per call");
}

template <typename T>
void run_partials_and_merge(const void* logits, const std::int32_t* targets,
                            const std::int32_t* in_rows, const std::int32_t* out_rows,
                            std::int64_t rows, std::int64_t vocab, float* logprob,
                            const LogprobSplit& split, void* workspace, std::uint64_t* error_record,
                            cudaStream_t s) {
  const std::int64_t pieces = piece_count(vocab, split);
  float* partials = static_cast<float*>(workspace);
  float* lse = partials + rows * pieces * 2;
  const bool aligned = vocab % kVector == 0;
  partials_kernel<T>
      <<<dim3(static_cast<unsigned>(pieces), static_cast<unsigned>(rows)), kThreads, 0, s>>>(
          static_cast<const T*>(logits), in_rows, vocab, split.piece, aligned, partials);
  BITCHECK_CUDA_LAUNCH_CHECK();
  merge_kernel<T><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, s>>>(
      static_cast<const T*>(logits), targets, in_rows, out_rows, rows, vocab, pieces,
      split.reverse_merge, partials, lse, logprob, error_record);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

template <typename T>
void run_backward(const void* logits, const std::int32_t* targets, const float* dlogprob,
                  const std::int32_t* in_rows, const std::int32_t* out_rows, std::int64_t rows,
                  std::int64_t vocab, void* dlogits, const LogprobSplit& split, void* workspace,
                  std::uint64_t* error_record, cudaStream_t s) {
  run_partials_and_merge<T>(logits, targets, in_rows, out_rows, rows, vocab, nullptr, split,
                            workspace, error_record, s);
  const std::int64_t pieces = piece_count(vocab, split);
  const float* lse = static_cast<const float*>(workspace) + rows * pieces * 2;
  dlogits_kernel<T>
      <<<dim3(static_cast<unsigned>(pieces), static_cast<unsigned>(rows)), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, dlogprob, in_rows, out_rows, vocab, split.piece,
          vocab % kVector == 0, lse, static_cast<T*>(dlogits), error_record);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

LogprobSplit logprob_split_by_rows(std::int64_t rows, std::int64_t vocab, int sm_count) {
  // Like a split-softmax kernel sizing its vocabulary split to fill the GPU: blocks per row from
  // the batch, pieces rounded up to 8 entries.
  const std::int64_t wanted =
      rows < 1 ? 1 : (2 * static_cast<std::int64_t>(sm_count) + rows - 1) / rows;
  const std::int64_t splits = wanted < 1 ? 1 : (wanted > 64 ? 64 : wanted);
  std::int64_t piece = (vocab + splits - 1) / splits;
  piece = (piece + kVector - 1) / kVector * kVector;
  return {piece, true};
}

std::size_t logprob_workspace_bytes(std::int64_t rows, std::int64_t vocab,
                                    const LogprobSplit& split) {
  return static_cast<std::size_t>(rows * (piece_count(vocab, split) * 2 + 1)) * sizeof(float);
}

void logprob_forward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                     const std::int32_t* in_rows, const std::int32_t* out_rows, std::int64_t rows,
                     std::int64_t vocab, float* logprob, const LogprobSplit& split, void* workspace,
                     std::uint64_t* error_record, CUstream_st* stream) {
  check_call(rows, vocab, split);
  if (rows == 0) return;
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case DeviceDType::bf16:
      return run_partials_and_merge<__nv_bfloat16>(logits, targets, in_rows, out_rows, rows, vocab,
                                                   logprob, split, workspace, error_record, s);
    case DeviceDType::fp16:
      return run_partials_and_merge<__half>(logits, targets, in_rows, out_rows, rows, vocab,
                                            logprob, split, workspace, error_record, s);
    case DeviceDType::fp32:
      return run_partials_and_merge<float>(logits, targets, in_rows, out_rows, rows, vocab, logprob,
                                           split, workspace, error_record, s);
  }
}

void logprob_backward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                      const float* dlogprob, const std::int32_t* in_rows,
                      const std::int32_t* out_rows, std::int64_t rows, std::int64_t vocab,
                      void* dlogits, const LogprobSplit& split, void* workspace,
                      std::uint64_t* error_record, CUstream_st* stream) {
  check_call(rows, vocab, split);
  if (rows == 0) return;
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case DeviceDType::bf16:
      return run_backward<__nv_bfloat16>(logits, targets, dlogprob, in_rows, out_rows, rows, vocab,
                                         dlogits, split, workspace, error_record, s);
    case DeviceDType::fp16:
      return run_backward<__half>(logits, targets, dlogprob, in_rows, out_rows, rows, vocab,
                                  dlogits, split, workspace, error_record, s);
    case DeviceDType::fp32:
      return run_backward<float>(logits, targets, dlogprob, in_rows, out_rows, rows, vocab, dlogits,
                                 split, workspace, error_record, s);
  }
}

}  // namespace bitcheck::cuda
