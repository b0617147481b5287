// A sum over an index range split among tp ranks (a row-parallel GEMM's K, a column-parallel
// GEMM's N in dX, a vocab-parallel softmax's V), reduced in the order of one TP impl: the CPU
// backend's simulated ranks use it, so each impl and control has the semantics of its GPU twin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/rank_sum.h"
#include "core/dtype.h"
#include "core/op.h"
#include "core/tensor_parallel.h"

namespace bitcheck {

enum class SplitOrder {
  // The range in 8 (max_tensor_parallel) equal chunks, each summed in index order in fp32, the
  // chunks' sums added in one fixed binary tree in fp32, rounded once: at P ranks each rank sums
  // its subtree and the collective finishes the tree, so every tp gives the same bits.
  fixed_chunks,
  // Control: the same chunks and tree, but each rank's subtree rounded to the dtype before the
  // collective finishes the tree: at tp = 1 nothing is rounded early, at tp > 1 it is.
  early_rounding,
  // NCCL's: each rank's share in index order in fp32, rounded to the dtype (the rank's GEMM
  // output), then the ranks' values summed as `RankSum` orders them (chain or ring).
  rank_chain,
  ring,
};

std::string to_string(SplitOrder order);

// sum over i in [0, count) of term(i), as `order` reduces it at `tp` ranks, rounded to `dtype`.
// `element` and `message` place the value in the collective's message (the ring's order needs
// them).
template <typename Term>
float split_sum(SplitOrder order, std::int64_t count, int tp, DType dtype, std::int64_t element,
                std::int64_t message, Term term);

// Implementation details of split_sum.
float finish_split_sum(SplitOrder order, const std::vector<float>& leaves, int tp, DType dtype,
                       std::int64_t element, std::int64_t message);

template <typename Term>
float split_sum(SplitOrder order, std::int64_t count, int tp, DType dtype, std::int64_t element,
                std::int64_t message, Term term) {
  const bool by_chunks = order == SplitOrder::fixed_chunks || order == SplitOrder::early_rounding;
  const int leaves = by_chunks ? 8 : tp;  // the fixed orders' chunks, else one share per rank
  std::vector<float> sums(static_cast<std::size_t>(leaves), 0.0f);
  for (int leaf = 0; leaf < leaves; ++leaf) {
    const std::int64_t first = count * leaf / leaves, last = count * (leaf + 1) / leaves;
    float sum = 0.0f;
    for (std::int64_t i = first; i < last; ++i) sum += term(i);
    sums[static_cast<std::size_t>(leaf)] = sum;
  }
  return finish_split_sum(order, sums, tp, dtype, element, message);
}

// One CPU TP impl's order over its split dim and what it claims: a row of the kind tables of the
// TP impls (matmul, the vocabulary ops).
struct SplitSumKind {
  const char* order_name;  // the impl's name is "cpu-tp-<what is split>-<order_name>"
  SplitOrder order;
  bool claims_invariance;
  TensorParallelism::AcrossTp across_tp;
  int drifts_from_tp;
  const char* description;
};

// What a TP impl declares for its split dims: any TP size up to max_tensor_parallel, with its claim
// across TP sizes (the CPU kinds here, the CUDA ones in common/rank_sum_cuda.h).
TensorParallelism split_parallelism(TensorParallelism::AcrossTp across_tp, int drifts_from_tp,
                                    std::vector<std::string> split_dims);

// The ImplInfo of a CPU TP impl of `kind` named `name`: invariant or a control that drifts in
// `control_passes` (the passes whose sums cross the ranks), on ranks that split `split_dims`.
ImplInfo split_sum_info(const SplitSumKind& kind, std::string name, std::string description,
                        std::vector<Pass> control_passes, std::vector<std::string> split_dims);

}  // namespace bitcheck
