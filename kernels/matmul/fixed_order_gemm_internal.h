// What the two halves of matmul/fixed-order share: fixed_order_gemm.cu (the Hopper wgmma path, its
// fp32-output and subtree forms, the shape choice, every public launcher of the forward) and
// fixed_order_gemm_portable.cu (the portable fp32-FMA path and the token-sequential dW). Included
// by those two files only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm_dtype.h"

namespace bitcheck::cuda::fixed_order_internal {

inline cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

// Throws std::invalid_argument naming `what` unless M, N, K >= 1, N and K are multiples of 8, all
// fit in int32 and a, b, c are non-null and 16-byte aligned.
void check_shape(const char* what, const void* a, const void* b, const void* c, int64_t M,
                 int64_t N, int64_t K);

// The portable path: y[M, N] = x[M, K] · w[N, K]ᵀ, one fp32 FMA chain per element over k in order,
// x's and w's rows ldx and ldw elements apart; y in `dtype`, or fp32 unrounded with float_out.
void launch_portable(GemmDType dtype, const void* x, int64_t ldx, const void* w, int64_t ldw,
                     void* y, bool float_out, int64_t M, int64_t N, int64_t K, cudaStream_t stream);

}  // namespace bitcheck::cuda::fixed_order_internal
