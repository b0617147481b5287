// CPU impls of matmul split over simulated ranks (tensor parallelism). Row-parallel: each rank
// holds a 1/tp share of K, its partial products are summed across the ranks in the forward (dX and
// dW stay rank-local, so the backward never sums across ranks). Column-parallel: each rank holds a
// 1/tp share of N, the forward is rank-local and gathered, dX sums its N shares across the ranks.
// The sum across ranks is one of common/split_sum.h's orders: fixed-order (the same bits at every
// tp), the rank chain (NCCL tree + Simple pinned: invariant in the batch only), and the controls
// (the ring at 3 or more ranks, partials rounded early, the naive TP pair).
#include <memory>
#include <vector>

#include "common/split_sum.h"
#include "common/token_reduction.h"
#include "matmul/matmul.h"

namespace bitcheck {
namespace {

enum class Split { rows, columns };  // K (row-parallel) or N (column-parallel) over the ranks

constexpr SplitSumKind kinds[] = {
    {"fixed-order", SplitOrder::fixed_chunks, true, TensorParallelism::AcrossTp::claimed, 1,
     "the split sum in 8 chunks of fp32 index-order sums added in one fixed binary tree, rounded "
     "once: each rank's subtree and the collective's upper levels form the same tree at every tp"},
    {"rank-chain", SplitOrder::rank_chain, true, TensorParallelism::AcrossTp::observed, 1,
     "each rank's share summed in fp32 and rounded (its GEMM's output), the ranks' values added in "
     "rank order in the dtype, as NCCL's tree + Simple pinned does: fixed in the batch, not across "
     "TP sizes"},
    {"ring", SplitOrder::ring, false, TensorParallelism::AcrossTp::observed, 3,
     "control: each rank's rounded share summed around NCCL's ring from the rank after the "
     "element's part of the message: the order moves with the batch at 3 or more ranks"},
    {"early-rounding", SplitOrder::early_rounding, false,
     TensorParallelism::AcrossTp::expected_to_drift, 2,
     "control: the fixed-order tree, but each rank's subtree rounded to the dtype before the "
     "collective finishes the tree, so tp > 1 differs from tp = 1"},
    {"naive-pair", SplitOrder::rank_chain, false, TensorParallelism::AcrossTp::expected_to_drift, 2,
     "control: the naive TP pair, a plain GEMM at tp = 1 against each rank's GEMM output (rounded "
     "to the dtype) summed across the ranks at tp > 1, the rank chain's arithmetic held to the "
     "same bits across TP sizes: a second rounding or another association at every tp > 1"},
};

// The pass whose sum crosses the ranks: the one a control drifts in.
Pass split_pass(Split split) {
  return split == Split::rows ? Pass::forward : Pass::backward;
}

ImplInfo info_of(Split split, const SplitSumKind& kind) {
  return split_sum_info(
      kind, std::string("cpu-tp-") + (split == Split::rows ? "row-" : "column-") + kind.order_name,
      std::string(split == Split::rows
                      ? "row-parallel (K split over ranks; the forward sums across them): "
                      : "column-parallel (N split over ranks; dX sums across them): ") +
          kind.description,
      {split_pass(split)}, {split == Split::rows ? "K" : "N"});
}

std::size_t at(std::int64_t index) {
  return static_cast<std::size_t>(index);
}

class MatmulTpCpu : public Impl {
 public:
  MatmulTpCpu(Split split, const SplitSumKind& kind)
      : Impl(info_of(split, kind)), split_(split), kind_(kind) {}

  // Rounding a rank's partial to fp32 changes nothing: the early-rounding control models a 16-bit
  // output dtype.
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (kind_.order == SplitOrder::early_rounding && spec.dtype == DType::fp32)
      return "the early-rounding control rounds partials to the output dtype: a no-op in fp32";
    return std::nullopt;
  }

  void run(Batch& batch) override {
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    // Operands widened to fp32 once (exact): the same products and sums as on the stored values.
    const std::vector<float> w = batch.in("w").to_floats();
    const std::vector<float> x = batch.in("x").to_floats();
    const std::vector<std::int64_t> slots = real_slots(batch);
    const DType dtype = batch.spec->dtype;
    // The sum over a dim the ranks split, in the impl's order, or rank-local in index order.
    auto sum = [&](bool across_ranks, std::int64_t count, std::int64_t element,
                   std::int64_t message, auto term) {
      if (!across_ranks) {
        float local = 0.0f;
        for (std::int64_t i = 0; i < count; ++i) local += term(i);
        return round_to(dtype, local);
      }
      return split_sum(kind_.order, count, batch.tp, dtype, element, message, term);
    };
    if (batch.spec->pass == Pass::forward) {
      Tensor& y = batch.out("y");
      for (std::int64_t s : slots) {
        for (std::int64_t j = 0; j < n; ++j) {
          y.set(s * n + j,
                sum(split_ == Split::rows, k, s * n + j, batch.slots() * n,
                    [&](std::int64_t c) { return x[at(s * k + c)] * w[at(j * k + c)]; }));
        }
      }
      return;
    }
    const std::vector<float> dy = batch.in("dy").to_floats();
    Tensor& dx = batch.out("dx");
    for (std::int64_t s : slots) {
      for (std::int64_t c = 0; c < k; ++c) {
        dx.set(s * k + c,
               sum(split_ == Split::columns, n, s * k + c, batch.slots() * k,
                   [&](std::int64_t j) { return dy[at(s * n + j)] * w[at(j * k + c)]; }));
      }
    }
    // dW: every rank its own rows (N) or columns (K) of it, over the tokens in token order.
    Tensor& dw = batch.out("dw");
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t c = 0; c < k; ++c) {
        float value = dw.get(j * k + c);
        for (std::int64_t s : slots) value += dy[at(s * n + j)] * x[at(s * k + c)];
        dw.set(j * k + c, value);
      }
    }
  }

 private:
  Split split_;
  const SplitSumKind& kind_;
};

}  // namespace

void register_matmul_tp_cpu(Registry& registry) {
  for (Split split : {Split::rows, Split::columns}) {
    for (const SplitSumKind& kind : kinds)
      registry.add_impl("matmul", std::make_unique<MatmulTpCpu>(split, kind));
  }
}

}  // namespace bitcheck
