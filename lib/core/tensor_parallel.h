// Tensor parallelism as a case dimension: a case at tp = P runs its layouts on P ranks (P GPUs, one
// process each, or P ranks simulated in one process on the CPU backend). What an impl splits over
// the ranks and what it claims across TP sizes is data it declares.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

// The TP sizes a case may have: the fixed-order reductions split K (or V, or N) into this many
// chunks summed in one binary tree, and a rank holds a power-of-two share of its leaves.
constexpr int max_tensor_parallel = 8;
bool is_valid_tp(int tp);                                       // 1, 2, 4 or 8
std::string valid_tp_choices();                                 // "1, 2, 4 or 8"
std::string tp_layout_name(const std::string& layout, int tp);  // "alone/tp=1"
// The layout and TP size a name such as "alone/tp=1" stands for; tp 0: no suffix (the case's tp).
std::pair<std::string, int> parse_tp_layout_name(const std::string& name);

struct TensorParallelism {
  // The dims of which each rank holds a 1/tp share (K for a row-parallel matmul, N for a
  // column-parallel one, V for a vocab-parallel lm_head, heads for attention); every one must be
  // divisible by the case's tp. Empty with max_tp > 1: the ranks split no dim (a collective).
  std::vector<std::string> split_dims;
  int max_tp = 1;  // 1: the impl runs on one rank only (it gets no cases at tp > 1)
  // Across TP sizes (a case at tp = P against the same rows alone at tp = 1):
  enum class AcrossTp {
    claimed,            // the same bits at every tp: a difference is drift (fixed-order)
    expected_to_drift,  // a control built to differ across TP sizes
    observed,           // not claimed: what it did is reported, never a failure (NCCL's sums)
  };
  AcrossTp across_tp = AcrossTp::observed;
  // A control whose drift needs this many ranks (a sum of two values is commutative, so a ring's
  // order cannot matter below 3): at a smaller tp its cases are not expected to drift.
  int drifts_from_tp = 1;
  bool supports(int tp) const { return tp == 1 || tp <= max_tp; }
  // Why a shape cannot be split over tp ranks, or nullopt.
  std::optional<std::string> split_problem(const std::map<std::string, std::int64_t>& dims,
                                           int tp) const;
};
std::string to_string(TensorParallelism::AcrossTp across_tp);

}  // namespace bitcheck
