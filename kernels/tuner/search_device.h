// Device helpers of `bitcheck algos` (kernels in search_device.cu): random GEMM inputs, one
// fingerprint per output row, row gathering, fp64 reference rows, and the cuBLASLt configuration
// variants (split-K counts, custom options, swizzle, cluster shapes) the search tries.
// Plain C++: no CUDA headers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "matmul/cublaslt_gemm.h"

namespace bitcheck::cuda {

// `count` elements uniform in [-1, 1) with full mantissas (the K-sum order shows in the bits),
// never zero; element i depends only on (seed, i), so a prefix of rows is the same at any M.
void algo_fill_random(GemmDType dtype, void* data, std::size_t count, std::uint64_t seed);

// One 64-bit fingerprint per row of a row-major [rows, row_bytes] matrix, of the row's bits only:
// a wrapping sum of per-element hashes, exact whatever the thread order. Writes device memory.
void algo_row_fingerprints(const void* matrix, std::int64_t rows, std::int64_t row_bytes,
                           std::uint64_t* fingerprints);

// Copies rows row_indices[i] (device array) of a [*, row_bytes] matrix to row i of `gathered`.
void algo_gather_rows(const void* matrix, const std::int64_t* row_indices, std::int64_t count,
                      std::int64_t row_bytes, void* gathered);

// fp64 reference of the GEMM rows listed in row_indices (device array), with the sum of |a*b| of
// each output for the rounding bound. forward: out[i, c] = sum_j X[r_i, j] W[c, j] (c < N, j < K);
// input_grad: out[i, c] = sum_j dY[r_i, j] W[j, c] (c < K, j < N). Device outputs [count, columns].
void algo_reference_rows(GemmDType dtype, LtGemmForm form, const void* input, const void* w,
                         const std::int64_t* row_indices, std::int64_t count, std::int64_t n,
                         std::int64_t k, double* value, double* abs_sum);

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
