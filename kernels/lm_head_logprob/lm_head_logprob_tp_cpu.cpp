// CPU impls of lm_head_logprob with the vocabulary split over simulated ranks (tensor
// parallelism, the vocab-parallel LM head and log-softmax of RL trainers): each rank holds V / tp
// rows of the table and computes its logits (in the case dtype); the row max, the sum of
// exponentials and the target logit are reduced across the ranks as logprob's TP impls do, and dh
// sums V across them in the kind's order (common/vocab_tp_cpu.h). dtable is rank-local.
#include <memory>

#include "common/vocab_cpu.h"
#include "common/vocab_tp_cpu.h"
#include "lm_head_logprob/lm_head_logprob.h"

namespace bitcheck {
namespace {

class LmHeadLogprobTpCpu : public VocabTpCpu {
 public:
  explicit LmHeadLogprobTpCpu(const SplitSumKind& kind)
      : VocabTpCpu(kind,
                   "V split over ranks (rank-local logits; the softmax statistics, the target "
                   "logit and dh reduced across them; dtable rank-local)",
                   {Pass::forward, Pass::backward}) {}

  void run(Batch& batch) override {
    const Tensor& table = batch.in("table");
    const Tensor& h = batch.in("h");
    Tensor logits(batch.spec->dtype, {batch.slots(), table.shape()[0]});
    logits.fill_nan();
    lm_head_forward(batch, h, table, logits, false);
    if (batch.spec->pass == Pass::forward) {
      vocab_parallel_logprob_rows(batch, logits, kind_.order, &batch.out("logprob"), nullptr);
      return;
    }
    Tensor dlogits(batch.spec->dtype, logits.shape());
    dlogits.fill_nan();
    vocab_parallel_logprob_rows(batch, logits, kind_.order, nullptr, &dlogits);
    vocab_parallel_input_grad(batch, dlogits, table, kind_.order, batch.out("dh"));
    lm_head_table_grad(batch, dlogits, h, batch.out("dtable"));
  }
};

}  // namespace

void register_lm_head_logprob_tp_cpu(Registry& registry) {
  for (const SplitSumKind& kind : vocab_tp_kinds())
    registry.add_impl("lm_head_logprob", std::make_unique<LmHeadLogprobTpCpu>(kind));
}

}  // namespace bitcheck
