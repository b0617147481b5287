// Device helpers of `bitcheck algos`: random inputs, row fingerprints, row gathering, the fp64
// reference of a few GEMM rows, and cuBLASLt configuration variants from algorithm capabilities.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/cuda_check.cuh"
#include "common/runtime.h"
#include "matmul/cublaslt_internal.cuh"
#include "tuner/search_device.h"

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

LtConfig lt_with_split_k(LtConfig base, std::int32_t splits) {
  base.splitk_num = splits;
  base.reduction_scheme =
      splits == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  return base;
}

bool lt_reduction_allowed(const LtConfig& config, GemmDType dtype, LtGemmForm form) {
  if (config.splitk_num == 1) return true;
  if (output_type(form, dtype) == CUDA_R_32F) return true;
  return config.reduction_scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

std::vector<LtConfig> lt_option_variants(const LtConfig& base, GemmDType dtype, LtGemmForm form) {
  const cudaDataType_t in = input_type(dtype);
  const cudaDataType_t out = output_type(form, dtype);
  cublasLtMatmulAlgo_t algo{};
  if (cublasLtMatmulAlgoInit(lt_handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, out, out,
                             base.algo_id, &algo) != CUBLAS_STATUS_SUCCESS) {
    return {};
  }
  std::vector<LtConfig> variants;
  const auto custom_max = capability<std::int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
  for (std::int32_t option = 0; option <= custom_max; ++option) {
    LtConfig variant = base;
    variant.custom_option = static_cast<std::uint32_t>(option);
    if (!variant.same_kernel(base)) variants.push_back(variant);
  }
  if (capability<std::uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0) {
    LtConfig variant = base;
    variant.cta_swizzling = base.cta_swizzling == 0 ? 1 : 0;
    variants.push_back(variant);
  }
  for (const cublasLtClusterShape_t cluster :
       {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
        CUBLASLT_CLUSTER_SHAPE_1x2x1}) {
    LtConfig variant = base;
    variant.cluster_shape_id = static_cast<std::uint16_t>(cluster);
    if (!variant.same_kernel(base)) variants.push_back(variant);
  }
  return variants;
}

}  // namespace bitcheck::cuda
