// The kernels of the GEMM rig (gemm_rig.h; gemm_rig_kernels.cu): random GEMM inputs, one
// fingerprint per output row, row gathering, fp64 reference rows. Plain C++: no CUDA headers.
#pragma once
#include <cstddef>
#include <cstdint>

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

}  // namespace bitcheck::cuda
