// The GEMM rig's kernels (gemm_rig_kernels.h): random inputs, row fingerprints, row gathering and
// the fp64 reference of a few GEMM rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/cuda_check.cuh"
#include "common/runtime.h"
#include "matmul/gemm_rig_kernels.h"

namespace bitcheck::cuda {
namespace {

__host__ __device__ std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One block per row (grid-stride over rows). Integer wrapping sums are associative, so the
// fingerprint does not depend on which thread hashed which element or in what order.
__global__ void row_fingerprint_kernel(const unsigned char* matrix, std::int64_t rows,
                                       std::int64_t row_bytes, std::uint64_t* out) {
  __shared__ unsigned long long block_sum;
  const std::int64_t units = row_bytes / 2;  // every dtype here has an even byte width
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if (threadIdx.x == 0) block_sum = 0;
    __syncthreads();
    const auto* data = reinterpret_cast<const std::uint16_t*>(matrix + row * row_bytes);
    unsigned long long sum = 0;
    for (std::int64_t j = threadIdx.x; j < units; j += blockDim.x) {
      sum += mix((static_cast<std::uint64_t>(j) << 16) | data[j]);
    }
    atomicAdd(&block_sum, sum);
    __syncthreads();
    if (threadIdx.x == 0) out[row] = mix(block_sum ^ static_cast<std::uint64_t>(row_bytes));
    __syncthreads();
  }
}

__global__ void gather_rows_kernel(const unsigned char* matrix, const std::int64_t* rows,
                                   std::int64_t row_bytes, unsigned char* out) {
  const unsigned char* source = matrix + rows[blockIdx.x] * row_bytes;
  unsigned char* target = out + blockIdx.x * row_bytes;
  for (std::int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) target[b] = source[b];
}

template <typename T>
__device__ double widen(T value) {
  return static_cast<double>(static_cast<float>(value));
}

// One thread per output element of one reference row (blockIdx.y): a plain fp64 dot product.
template <typename T>
__global__ void reference_rows_kernel(bool forward, const T* input, const T* w,
                                      const std::int64_t* rows, std::int64_t n, std::int64_t k,
                                      double* value, double* abs_sum) {
  const std::int64_t columns = forward ? n : k;
  const std::int64_t inner = forward ? k : n;
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= columns) return;
  const T* a = input + rows[blockIdx.y] * inner;
  double sum = 0, magnitude = 0;
  for (std::int64_t j = 0; j < inner; ++j) {
    const double b = forward ? widen(w[c * k + j]) : widen(w[j * k + c]);
    const double p = widen(a[j]) * b;
    sum += p;
    magnitude += fabs(p);
  }
  value[blockIdx.y * columns + c] = sum;
  abs_sum[blockIdx.y * columns + c] = magnitude;
}

template <typename T>
void launch_reference(LtGemmForm form, const void* input, const void* w, const std::int64_t* rows,
                      std::int64_t count, std::int64_t n, std::int64_t k, double* value,
                      double* abs_sum) {
  const bool forward = form == LtGemmForm::forward;
  const std::int64_t columns = forward ? n : k;
  const dim3 grid(static_cast<unsigned>((columns + 127) / 128), static_cast<unsigned>(count));
  reference_rows_kernel<T><<<grid, 128>>>(forward, static_cast<const T*>(input),
                                          static_cast<const T*>(w), rows, n, k, value, abs_sum);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void algo_fill_random(GemmDType dtype, void* data, std::size_t count, std::uint64_t seed) {
  fill_uniform(data, count,
               dtype == GemmDType::bf16   ? DeviceDType::bf16
               : dtype == GemmDType::fp16 ? DeviceDType::fp16
                                          : DeviceDType::fp32,
               seed);
}

void algo_row_fingerprints(const void* matrix, std::int64_t rows, std::int64_t row_bytes,
                           std::uint64_t* fingerprints) {
  if (rows <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(rows, 4096));
  row_fingerprint_kernel<<<blocks, 256>>>(static_cast<const unsigned char*>(matrix), rows,
                                          row_bytes, fingerprints);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void algo_gather_rows(const void* matrix, const std::int64_t* row_indices, std::int64_t count,
                      std::int64_t row_bytes, void* gathered) {
  if (count <= 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(count), 256>>>(
      static_cast<const unsigned char*>(matrix), row_indices, row_bytes,
      static_cast<unsigned char*>(gathered));
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void algo_reference_rows(GemmDType dtype, LtGemmForm form, const void* input, const void* w,
                         const std::int64_t* row_indices, std::int64_t count, std::int64_t n,
                         std::int64_t k, double* value, double* abs_sum) {
  if (count <= 0) return;
  switch (dtype) {
    case GemmDType::bf16:
      launch_reference<__nv_bfloat16>(form, input, w, row_indices, count, n, k, value, abs_sum);
      break;
    case GemmDType::fp16:
      launch_reference<__half>(form, input, w, row_indices, count, n, k, value, abs_sum);
      break;
    case GemmDType::fp32:
      launch_reference<float>(form, input, w, row_indices, count, n, k, value, abs_sum);
      break;
  }
}

}  // namespace bitcheck::cuda
