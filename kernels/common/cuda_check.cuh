// The one error-checking macro for CUDA runtime and cuBLASLt calls in kernels/ (.cu files only).
// Throws bitcheck::cuda::CudaError carrying file, line, the error's name and the failing call.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "runtime.h"

namespace bitcheck::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}
}  // namespace bitcheck::cuda::detail

#define BITCHECK_CUDA_CALL(call) ::bitcheck::cuda::detail::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations at the launch site.
#define BITCHECK_CUDA_LAUNCH_CHECK() BITCHECK_CUDA_CALL(cudaGetLastError())
// In destructors: report nothing, never throw.
#define BITCHECK_CUDA_CALL_NOEXCEPT(call) static_cast<void>(call)
