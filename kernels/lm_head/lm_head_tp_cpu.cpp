// CPU impls of lm_head with the vocabulary split over simulated ranks (tensor parallelism): each
// rank holds V / tp rows of the table. Its logits and its rows of dtable are rank-local (gathered,
// an exact copy); dh sums over V, so the ranks' shares are added across them in the kind's order
// (common/vocab_tp_cpu.h).
#include <memory>

#include "common/vocab_cpu.h"
#include "common/vocab_tp_cpu.h"
#include "lm_head/lm_head.h"

namespace bitcheck {
namespace {

class LmHeadTpCpu : public VocabTpCpu {
 public:
  // Only dh sums across the ranks: the controls drift in the backward.
  explicit LmHeadTpCpu(const SplitSumKind& kind)
      : VocabTpCpu(kind, "V split over ranks (logits and dtable rank-local; dh sums V across them)",
                   {Pass::backward}) {}

  void run(Batch& batch) override {
    const Tensor& table = batch.in("table");
    if (batch.spec->pass == Pass::forward) {
      lm_head_forward(batch, batch.in("h"), table, batch.out("logits"), false);
      return;
    }
    vocab_parallel_input_grad(batch, batch.in("dlogits"), table, kind_.order, batch.out("dh"));
    lm_head_table_grad(batch, batch.in("dlogits"), batch.in("h"), batch.out("dtable"));
  }
};

}  // namespace

void register_lm_head_tp_cpu(Registry& registry) {
  for (const SplitSumKind& kind : vocab_tp_kinds())
    registry.add_impl("lm_head", std::make_unique<LmHeadTpCpu>(kind));
}

}  // namespace bitcheck
