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

TensorParallelism split_parallelism(TensorParallelism::AcrossTp across_tp, int drifts_from_tp,
                                    std::vector<std::string> split_dims) {
  TensorParallelism parallelism;
  parallelism.split_dims = std::move(split_dims);
  parallelism.max_tp = max_tensor_parallel;
  parallelism.across_tp = across_tp;
  parallelism.drifts_from_tp = drifts_from_tp;
  return parallelism;
}

float finish_split_sum(SplitOrder order, const std::vector<float>& leaves, int tp, DType dtype,
                       std::int64_t element, std::int64_t message) {
  const int count = static_cast<int>(leaves.size());
  switch (order) {
    case SplitOrder::fixed_chunks:
      return round_to(dtype, fixed_tree(leaves.data(), count));
    case SplitOrder::early_rounding: {
      std::vector<float> ranks(static_cast<std::size_t>(tp));
      for (int rank = 0; rank < tp; ++rank) {
        const auto [first, last] = rank_leaves(count, tp, rank);
        const float subtree = fixed_tree(leaves.data() + first, last - first);
        ranks[static_cast<std::size_t>(rank)] = tp > 1 ? round_to(dtype, subtree) : subtree;
      }
      return round_to(dtype, fixed_tree(ranks.data(), tp));
    }
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

}  // namespace bitcheck
