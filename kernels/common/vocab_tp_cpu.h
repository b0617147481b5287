// CPU building blocks of the vocabulary-parallel TP impls (lm_head, logprob and lm_head_logprob
// with V split over simulated ranks): the row max over the ranks, the sum of exponentials over V
// as a split sum in the impl's order, the target logit from the rank that owns it, dh's split sum
// over V, the kind table the three ops share and the base of their impls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/split_sum.h"
#include "core/op.h"

namespace bitcheck {

// The kinds of the vocabulary-parallel CPU impls, named cpu-tp-vocab-<order_name>.
const std::vector<SplitSumKind>& vocab_tp_kinds();

// The larger of two values in an order that makes the max of a row a function of its values
// alone, however they are split and combined: a NaN is passed over (it reaches the sum through
// exp), -0 is below +0.
float ordered_max(float a, float b);

// The softmax statistics of one row with V split over tp ranks.
struct VocabSoftmax {
  float max = 0.0f;      // each rank's max, then the max over the ranks: exact in any order
  float log_sum = 0.0f;  // log of the sum over V of exp(x - max), summed in the kind's order
};

// The statistics of `logits` (one row, V values) at `tp` ranks. The sum of exponentials is fp32
// (each rank's partial and the collective; the early-rounding control keeps it in `dtype`), and
// `slot` of `slots` places the row in the collective's message (one value per slot).
VocabSoftmax vocab_parallel_softmax(const std::vector<float>& logits, SplitOrder order, int tp,
                                    DType dtype, std::int64_t slot, std::int64_t slots);

// For each real slot of `logits` [slots, V] against the batch input "target": logprob[s] =
// (x[target] - max) - log_sum in fp32, the target logit copied from the rank that owns it; and/or
// dlogits[s, v] = dlogprob[s] * (onehot - exp((x[v] - max) - log_sum)) rounded to dlogits' dtype
// (rank-local once the statistics are known).
void vocab_parallel_logprob_rows(const Batch& batch, const Tensor& logits, SplitOrder order,
                                 Tensor* logprob, Tensor* dlogits);

// dh[s, c] = sum over v of dlogits[s, v] * table[v, c] for each real slot, V split over batch.tp
// ranks and summed across them in `order`, rounded to dh's dtype.
void vocab_parallel_input_grad(const Batch& batch, const Tensor& dlogits, const Tensor& table,
                               SplitOrder order, Tensor& dh);

// The base of the vocabulary-parallel CPU impls: cpu-tp-vocab-<order>, its claims and V split
// over the ranks from the kind. A control drifts by construction in `control_passes`, the passes
// whose sums cross the ranks.
class VocabTpCpu : public Impl {
 public:
  VocabTpCpu(const SplitSumKind& kind, const std::string& what_is_split,
             std::vector<Pass> control_passes)
      : Impl(split_sum_info(kind, std::string("cpu-tp-vocab-") + kind.order_name,
                            what_is_split + ": " + kind.description, std::move(control_passes),
                            {"V"})),
        kind_(kind) {}
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override;

 protected:
  const SplitSumKind& kind_;
};

}  // namespace bitcheck
