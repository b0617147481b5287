// The cuBLASLt primitives of the configuration search (`bitcheck algos`, apps/tuner/): a shape's
// candidate configurations, and the variants of one configuration the search tries (split-K counts,
// custom options, swizzle, cluster shapes) within the accumulation policy. Plain C++: no CUDA
// headers (cublaslt_search.cu).
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

// `base` with `splits` K splits: reduction none for 1, in the compute type (fp32) above.
LtConfig lt_with_split_k(LtConfig base, std::int32_t splits);

// The accumulation policy (fp32 accumulation for every dtype): split-K partial sums must be
// reduced in fp32. In-place and output-type reductions add them in the output type, which for a
// bf16/fp16 output rounds every partial sum: allowed only when the output is fp32.
bool lt_reduction_allowed(const LtConfig& config, GemmDType dtype, LtGemmForm form);

// Variants of `base` within its algorithm's capabilities: every custom option, the other CTA
// swizzle, and the usual cluster shapes (auto, 1x1x1, 2x1x1, 1x2x1); one setting changed at a time.
// Not checked against a shape (the caller does that).
std::vector<LtConfig> lt_option_variants(const LtConfig& base, GemmDType dtype, LtGemmForm form);

}  // namespace bitcheck::cuda
