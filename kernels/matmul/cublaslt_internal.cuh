// cuBLASLt plumbing shared by the GEMM wrappers (cublaslt_gemm.cu) and the configuration search's
// primitives (cublaslt_search.cu): one library handle per process, the problem descriptors and
// heuristic queries of one shape, and typed capability reads.
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include "cublaslt_gemm.h"

namespace bitcheck::cuda {

// The most workspace a heuristic or enumerated configuration may need.
constexpr std::size_t kHeuristicWorkspaceBytes = 32u << 20;
// Heuristic results asked for when deriving a pin or enumerating candidates.
constexpr int kPinnedCandidateCount = 64;
// fp32 accumulation for every dtype; plain 32F (not 32F_FAST_TF32) keeps fp32 inputs in fp32.
constexpr cublasComputeType_t kComputeType = CUBLAS_COMPUTE_32F;
constexpr cudaDataType_t kScaleType = CUDA_R_32F;

cudaDataType_t input_type(GemmDType dtype);
cudaDataType_t output_type(LtGemmForm form, GemmDType dtype);

// One GEMM problem: form, dtype and shape (M the token count; for weight_grad the chunk's T).
struct ProblemKey {
  LtGemmForm form;
  GemmDType dtype;
  int64_t M, N, K;
  bool operator<(const ProblemKey& o) const {
    return std::tie(form, dtype, M, N, K) < std::tie(o.form, o.dtype, o.M, o.N, o.K);
  }
};

// std::invalid_argument unless every dimension is positive.
void require_shape(const ProblemKey& key);
// The configuration an algorithm handle holds, with the workspace it needs.
LtConfig config_from_algo(const cublasLtMatmulAlgo_t& algo, std::size_t workspace_bytes);
// Returns false when this cuBLASLt does not know the algorithm id for these types.
bool init_algo(const LtConfig& c, LtGemmForm form, GemmDType dtype, cublasLtMatmulAlgo_t& algo);
// The heuristic's first `count` results for the problem, those that succeeded and keep fp32
// numerics only (32 MiB of workspace at most).
std::vector<cublasLtMatmulHeuristicResult_t> heuristic_results(const ProblemKey& key, int count);

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
