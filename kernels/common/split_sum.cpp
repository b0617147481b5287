// The split sums' last steps: the chunk tree, the early-rounded subtrees, the ranks' sums.
#include "common/split_sum.h"

#include <stdexcept>

namespace bitcheck {

std::string to_string(SplitOrder order) {
  switch (order) {
    case SplitOrder::fixed_chunks:
      return "fixed chunks";
    case SplitOrder::early_rounding:
      return "early rounding";
    case SplitOrder::rank_chain:
      return "rank chain";
    case SplitOrder::ring:
      return "ring";
  }
  return "";
}

namespace {

// Each rank's subtree of the chunk tree (its leaves, summed in fp32 as the fixed tree orders them),
// rounded to the dtype when `round_early` (the early-rounding control; a no-op at tp = 1), then
// the tree over the ranks' values as the collective finishes it, rounded once. With 8 leaves and
// tp a power of two the ranks' subtrees are the whole tree's, so every tp gives the same bits.
float finish_chunk_tree(const std::vector<float>& leaves, int tp, DType dtype, bool round_early) {
  const int count = static_cast<int>(leaves.size());
  std::vector<float> ranks(static_cast<std::size_t>(tp));
  for (int rank = 0; rank < tp; ++rank) {
    const auto [first, last] = rank_leaves(count, tp, rank);
    const float subtree = fixed_tree(leaves.data() + first, last - first);
    ranks[static_cast<std::size_t>(rank)] =
        round_early && tp > 1 ? round_to(dtype, subtree) : subtree;
  }
  return round_to(dtype, fixed_tree(ranks.data(), tp));
}

}  // namespace

float finish_split_sum(SplitOrder order, const std::vector<float>& leaves, int tp, DType dtype,
                       std::int64_t element, std::int64_t message) {
  switch (order) {
    case SplitOrder::fixed_chunks:
      return finish_chunk_tree(leaves, tp, dtype, false);
    case SplitOrder::early_rounding:
      return finish_chunk_tree(leaves, tp, dtype, true);
    case SplitOrder::rank_chain:
    case SplitOrder::ring: {
      std::vector<float> ranks(leaves.size());
      for (std::size_t rank = 0; rank < leaves.size(); ++rank)
        ranks[rank] = round_to(dtype, leaves[rank]);
      return sum_ranks(order == SplitOrder::ring ? RankSum::ring : RankSum::rank_chain, ranks,
                       dtype, element, message);
    }
  }
  throw std::logic_error("finish_split_sum: unknown order");
}

TensorParallelism split_parallelism(TensorParallelism::AcrossTp across_tp, int drifts_from_tp,
                                    std::vector<std::string> split_dims) {
  TensorParallelism parallelism;
  parallelism.split_dims = std::move(split_dims);
  parallelism.max_tp = max_tensor_parallel;
  parallelism.across_tp = across_tp;
  parallelism.drifts_from_tp = drifts_from_tp;
  return parallelism;
}

ImplInfo split_sum_info(const SplitSumKind& kind, std::string name, std::string description,
                        std::vector<Pass> control_passes, std::vector<std::string> split_dims) {
  ImplInfo info = kind.claims_invariance
                      ? ImplInfo::invariant(std::move(name), "cpu", std::move(description))
                      : ImplInfo::control(std::move(name), "cpu", std::move(description));
  info.drifting_in(std::move(control_passes))
      .on_ranks(split_parallelism(kind.across_tp, kind.drifts_from_tp, std::move(split_dims)));
  return info;
}

}  // namespace bitcheck
