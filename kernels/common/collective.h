// The collectives' impls, shared by the ops all_reduce and reduce_scatter (the same logical sum of
// one contribution per rank; they differ in what a rank receives and in NCCL's algorithms).
#pragma once
#include <string>

#include "core/op.h"

namespace bitcheck {

enum class Collective { all_reduce, reduce_scatter };

// The op's FP32 definition: x [tp, H] per row (rank r's contribution at [r * H, (r + 1) * H), drawn
// from (seed, x, row, r * H + c)), y [H] the sum over the ranks; the reference sums in rank order.
void register_collective_op(Registry& registry, Collective collective);

// collective_cpu.cpp: the simulated ranks, each order of common/rank_sum.h over the message of
// an invocation (slots x H elements, pad slots included, as a real collective sends them).
void register_collective_cpu(Registry& registry, Collective collective);
// collective_cuda.cpp (CUDA build): the rank processes and NCCL.
void register_collective_cuda(Registry& registry, Collective collective);

std::string collective_name(Collective collective);

}  // namespace bitcheck
