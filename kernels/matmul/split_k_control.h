// The GEMM of the CUDA split-K-by-rows controls (matmul, lm_head): a split-K whose split is chosen
// from the batch, as library heuristics choose it to fill the GPU when M is small.
#pragma once
#include <cstdint>

#include "common/runtime.h"
#include "core/tensor.h"

namespace bitcheck::cuda {

// Below this many real rows in an invocation the controls split the reduction.
constexpr std::int64_t split_k_below_rows = 4;
constexpr int split_k_parts = 4;

// Y[M,C] = X[M,R] · W[C,R]ᵀ (w: the device copy of W) as `parts` products over consecutive slices
// of R, each computed by the fixed-order GEMM on X with the other slices zeroed (the same fp32
// chain as a slice of its own: the zero terms add nothing), rounded to the dtype and summed in
// slice order in the dtype, as an OUTPUT_TYPE split-K reduction does. `parts` = 1 is the plain
// GEMM. The partials' extra roundings change the bits of almost every element against parts = 1: a
// control that picks `parts` from its batch drifts on every GPU, by construction.
void split_k_gemm(const Tensor& x, const DeviceBuffer& w, std::int64_t columns, int parts,
                  Tensor& y);

}  // namespace bitcheck::cuda
