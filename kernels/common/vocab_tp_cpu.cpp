// The vocabulary-parallel building blocks on simulated ranks: the exact row max, the split sum of
// exponentials, the owner's target logit, dh's split sum, and the kinds of the impls.
#include "common/vocab_tp_cpu.h"

#include <cmath>
#include <limits>

#include "common/token_reduction.h"
#include "common/vocab_cpu.h"
#include "common/vocab_ops.h"

namespace bitcheck {

const std::vector<SplitSumKind>& vocab_tp_kinds() {
  static const std::vector<SplitSumKind> kinds = {
      {"fixed-order", SplitOrder::fixed_chunks, true, TensorParallelism::AcrossTp::claimed, 1,
       "each sum over V (the exponentials, dh) in 8 chunks of fp32 index-order sums added in one "
       "fixed binary tree, rounded once: a rank's chunks and the collective's upper levels form "
       "the same tree at every tp; the max and the target logit are exact"},
      {"rank-chain", SplitOrder::rank_chain, true, TensorParallelism::AcrossTp::observed, 1,
       "each rank's share summed in index order (fp32 for the exponentials, rounded to the dtype "
       "for dh, its GEMM's output), the ranks' values added in rank order, as NCCL's tree + "
       "Simple pinned does: fixed in the batch, not across TP sizes"},
      {"ring", SplitOrder::ring, false, TensorParallelism::AcrossTp::observed, 3,
       "control: the ranks' shares summed around NCCL's ring from the rank after the element's "
       "part of the message (one value per row for the exponentials): the order moves with the "
       "batch at 3 or more ranks"},
      {"early-rounding", SplitOrder::early_rounding, false,
       TensorParallelism::AcrossTp::expected_to_drift, 2,
       "control: the fixed-order tree with each rank's subtree rounded to the case dtype before "
       "the collective finishes it (the exponentials' sum kept in the dtype), so tp > 1 differs "
       "from tp = 1"},
      {"naive-pair", SplitOrder::rank_chain, false, TensorParallelism::AcrossTp::expected_to_drift,
       2,
       "control: the naive TP pair, a plain index-order sum over V at tp = 1 against each rank's "
       "share summed and added across the ranks at tp > 1, the rank chain's arithmetic held to "
       "the same bits across TP sizes"},
  };
  return kinds;
}

float ordered_max(float a, float b) {
  if (std::isnan(b)) return a;
  if (std::isnan(a)) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

VocabSoftmax vocab_parallel_softmax(const std::vector<float>& logits, SplitOrder order, int tp,
                                    DType dtype, std::int64_t slot, std::int64_t slots) {
  const auto vocab = static_cast<std::int64_t>(logits.size());
  const std::int64_t share = vocab / tp;
  VocabSoftmax softmax;
  softmax.max = -std::numeric_limits<float>::infinity();
  for (int rank = 0; rank < tp; ++rank) {
    float rank_max = -std::numeric_limits<float>::infinity();
    for (std::int64_t v = rank * share; v < (rank + 1) * share; ++v)
      rank_max = ordered_max(rank_max, logits[static_cast<std::size_t>(v)]);
    softmax.max = ordered_max(softmax.max, rank_max);
  }
  const DType sum_dtype = order == SplitOrder::early_rounding ? dtype : DType::fp32;
  const float sum = split_sum(order, vocab, tp, sum_dtype, slot, slots, [&](std::int64_t v) {
    return std::exp(logits[static_cast<std::size_t>(v)] - softmax.max);
  });
  softmax.log_sum = std::log(sum);
  return softmax;
}

void vocab_parallel_logprob_rows(const Batch& batch, const Tensor& logits, SplitOrder order,
                                 Tensor* logprob, Tensor* dlogits) {
  const std::int64_t vocab = logits.row_size();
  const Tensor& targets = batch.in("target");
  for (std::int64_t s : real_slots(batch)) {
    const std::int64_t target = checked_target(targets, s, vocab, "logprob");
    const std::vector<float> x = row_values(logits, s);
    const VocabSoftmax softmax =
        vocab_parallel_softmax(x, order, batch.tp, logits.dtype(), s, batch.slots());
    if (logprob) {
      // The owner's logit, copied (each rank holds V / tp consecutive entries).
      const float target_logit = x[static_cast<std::size_t>(target)];
      logprob->set(s, (target_logit - softmax.max) - softmax.log_sum);
    }
    if (!dlogits) continue;
    const float upstream = batch.in("dlogprob").get(s);
    for (std::int64_t v = 0; v < vocab; ++v) {
      const float onehot = v == target ? 1.0f : 0.0f;
      const float p = std::exp((x[static_cast<std::size_t>(v)] - softmax.max) - softmax.log_sum);
      dlogits->set(s * vocab + v, upstream * (onehot - p));
    }
  }
}

void vocab_parallel_input_grad(const Batch& batch, const Tensor& dlogits, const Tensor& table,
                               SplitOrder order, Tensor& dh) {
  const std::int64_t vocab = table.shape()[0], hidden = table.shape()[1];
  const std::vector<float> weights = table.to_floats();
  for (std::int64_t s : real_slots(batch)) {
    const std::vector<float> g = row_values(dlogits, s);
    for (std::int64_t c = 0; c < hidden; ++c) {
      dh.set(s * hidden + c, split_sum(order, vocab, batch.tp, dh.dtype(), s * hidden + c,
                                       batch.slots() * hidden, [&](std::int64_t v) {
                                         return g[static_cast<std::size_t>(v)] *
                                                weights[static_cast<std::size_t>(v * hidden + c)];
                                       }));
    }
  }
}

std::optional<std::string> VocabTpCpu::skip_reason(const CaseSpec& spec) const {
  if (kind_.order == SplitOrder::early_rounding && spec.dtype == DType::fp32)
    return "the early-rounding control rounds partials to the case dtype: a no-op in fp32";
  return std::nullopt;
}

}  // namespace bitcheck
