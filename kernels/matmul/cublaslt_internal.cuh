// cuBLASLt plumbing shared by the GEMM wrappers (cublaslt_gemm.cu) and the configuration search
// (algo_search_device.cu): one library handle per process and typed capability reads.
#pragma once
#include <cublasLt.h>

#include <cstddef>

namespace bitcheck::cuda {

// One handle per process, never destroyed: cuBLASLt handles are cheap to keep and the library
// may still be called from static destructors elsewhere.
cublasLtHandle_t lt_handle();

// A scalar capability of an algorithm, or T{} when cuBLASLt does not report it.
template <typename T>
T capability(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attribute) {
  T value{};
  std::size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return T{};
  }
  return value;
}

}  // namespace bitcheck::cuda
