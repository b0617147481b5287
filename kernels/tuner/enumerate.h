// Candidate cuBLASLt configurations of one GEMM shape for the search (kernels in enumerate.cu).
// Plain C++: no CUDA headers.
#pragma once
#include <cstdint>
#include <vector>

#include "matmul/cublaslt_gemm.h"

namespace bitcheck::cuda {

// Candidate configurations that cublasLtMatmulAlgoCheck accepts for this shape, at most
// max_count, distinct kernels only: the heuristic's list first, then split-K variants of those,
// then tiles and stages of every algorithm id. For weight_grad, M is the chunk's T.
std::vector<LtConfig> lt_enumerate_configs(GemmDType dtype, int64_t M, int64_t N, int64_t K,
                                           int max_count, LtGemmForm form = LtGemmForm::forward);

}  // namespace bitcheck::cuda
