// The collectives' local sums over gathered contributions (common/collective_cuda.cpp). Kernels:
//   fixed_tree_kernel  one thread per element: the ranks' values summed in one balanced fp32 tree
//   in
//                      rank order, rounded once. Nothing in the order depends on the message size,
//                      the batch or the element's position: every element of every batch sums
//                      (v0 + v1) + (v2 + v3) at 4 ranks.
//   fp32_tree_kernel   the same tree over fp32 partials, rounded once to the output dtype (a TP
//                      GEMM's chunk tree, finished across the ranks).
//   chain_kernel       one thread per element: a chain in the dtype from rank `start` (the control
//                      passes a start that moves with the message size).
#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/dtype_dispatch.cuh"
#include "common/gathered_sum.h"

namespace bitcheck::cuda {
namespace {

constexpr int max_ranks = 8;
constexpr int threads = 256;

// The same recursion as the CPU's fixed_tree (common/rank_sum.cpp): halves, left first.
__device__ float tree(const float* values, int count) {
  float level[max_ranks];
  for (int i = 0; i < count; ++i) level[i] = values[i];
  for (int width = count; width > 1; width /= 2) {
    for (int i = 0; i < width / 2; ++i) level[i] = level[2 * i] + level[2 * i + 1];
  }
  return level[0];
}

template <typename T>
__global__ void fixed_tree_kernel(const T* gathered, T* out, std::size_t count, int ranks) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float values[max_ranks];
  for (int r = 0; r < ranks; ++r) values[r] = to_float(gathered[r * count + i]);
  out[i] = from_float<T>(tree(values, ranks));
}

template <typename T>
__global__ void fp32_tree_kernel(const float* gathered, T* out, std::size_t count, int ranks) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float values[max_ranks];
  for (int r = 0; r < ranks; ++r) values[r] = gathered[r * count + i];
  out[i] = from_float<T>(tree(values, ranks));
}

template <typename T>
__global__ void chain_kernel(const T* gathered, T* out, std::size_t count, int ranks, int start) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float sum = to_float(gathered[(start % ranks) * count + i]);
  for (int step = 1; step < ranks; ++step)
    sum = to_float(from_float<T>(sum + to_float(gathered[((start + step) % ranks) * count + i])));
  out[i] = from_float<T>(sum);
}

unsigned blocks(std::size_t count) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace

void sum_gathered_fixed_tree(DeviceDType dtype, const void* gathered, void* out, std::size_t count,
                             int ranks, void* stream) {
  if (count == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    fixed_tree_kernel<T><<<blocks(count), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(gathered), static_cast<T*>(out), count, ranks);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void sum_gathered_fp32_tree(DeviceDType out_dtype, const float* gathered, void* out,
                            std::size_t count, int ranks, void* stream) {
  if (count == 0) return;
  by_dtype(out_dtype, [&](auto type) {
    using T = decltype(type);
    fp32_tree_kernel<T><<<blocks(count), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        gathered, static_cast<T*>(out), count, ranks);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void sum_gathered_chain(DeviceDType dtype, const void* gathered, void* out, std::size_t count,
                        int ranks, int start, void* stream) {
  if (count == 0) return;
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    chain_kernel<T><<<blocks(count), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(gathered), static_cast<T*>(out), count, ranks, start);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
