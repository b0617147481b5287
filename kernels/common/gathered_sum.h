// The collectives' local sums on the device, after an exact all-gather of the ranks' contributions.
#pragma once
#include <cstddef>

#include "common/device_dtype.h"

namespace bitcheck::cuda {

// out[i] = the sum over ranks of gathered[r * count + i]: a balanced fp32 tree over the ranks in
// rank order, rounded once (fixed-order), or a chain in the dtype starting at rank `start`
// (rounded after each addition). On `stream` (a cudaStream_t).
void sum_gathered_fixed_tree(DeviceDType dtype, const void* gathered, void* out, std::size_t count,
                             int ranks, void* stream);
// The same fixed tree over `ranks` fp32 partials (gathered[r * count + i]), rounded once to
// `out_dtype`: the upper levels of a TP GEMM's chunk tree.
void sum_gathered_fp32_tree(DeviceDType out_dtype, const float* gathered, void* out,
                            std::size_t count, int ranks, void* stream);
void sum_gathered_chain(DeviceDType dtype, const void* gathered, void* out, std::size_t count,
                        int ranks, int start, void* stream);

}  // namespace bitcheck::cuda
