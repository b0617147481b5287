// CPU impls of logprob with the vocabulary split over simulated ranks (tensor parallelism, as RL
// trainers compute logprobs from vocab-parallel logits): each rank holds V / tp entries of a row,
// the row max is reduced over the ranks exactly, the sum of exponentials across them in the
// kind's order (common/vocab_tp_cpu.h), and the target logit comes from the rank that owns it.
// The backward's dlogits are rank-local once the statistics are known.
#include <memory>

#include "common/vocab_tp_cpu.h"
#include "logprob/logprob.h"

namespace bitcheck {
namespace {

class LogprobTpCpu : public VocabTpCpu {
 public:
  // The controls are expected to drift in the forward, where the sum reaches the fp32 logprob
  // directly; in the backward it moves dlogits by a fraction of an ulp of the dtype, which rounding
  // hides in most entries (a large batch shows some: reported, not expected).
  explicit LogprobTpCpu(const SplitSumKind& kind)
      : VocabTpCpu(kind,
                   "V split over ranks (the row max and the sum of exponentials reduced across "
                   "them, the target logit from its owner)",
                   {Pass::forward}) {}

  void run(Batch& batch) override {
    const Tensor& logits = batch.in("logits");
    if (batch.spec->pass == Pass::forward) {
      vocab_parallel_logprob_rows(batch, logits, kind_.order, &batch.out("logprob"), nullptr);
      return;
    }
    vocab_parallel_logprob_rows(batch, logits, kind_.order, nullptr, &batch.out("dlogits"));
  }
};

}  // namespace

void register_logprob_tp_cpu(Registry& registry) {
  for (const SplitSumKind& kind : vocab_tp_kinds())
    registry.add_impl("logprob", std::make_unique<LogprobTpCpu>(kind));
}

}  // namespace bitcheck
