// CUDA impls of logprob with the vocabulary split over rank processes (NCCL), the twins of
// logprob_tp_cpu.cpp: each rank cuts its V / tp entries of every real row out of the logits, the
// row max is reduced across the ranks exactly, the sum of exponentials in the kind's order
// (common/vocab_tp_cuda.h), the target logit comes from the rank that holds it; the backward's
// dlogits are rank-local and all-gathered.
#include <memory>

#include "common/adapter_support.h"
#include "common/vocab_tp_cuda.h"
#include "logprob/logprob.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;

class LogprobTpCuda : public vocab_tp::VocabTpCuda {
 public:
  // As on the CPU, the controls are expected to drift in the forward only (fp32 logprob).
  explicit LogprobTpCuda(const cuda_tp::RankOrderKind& kind)
      : VocabTpCuda(kind,
                    "V split over ranks (the row max and the sum of exponentials reduced across "
                    "them, the target logit from its owner)",
                    {Pass::forward}, false) {}

  void run(Batch& batch) override {
    const std::vector<std::int32_t> slots = cs::real_slot_list(batch);
    if (slots.empty()) return;
    record_path("split-sum");
    const vocab_tp::RankShare share = vocab_tp::rank_share(batch);
    const DeviceBuffer logits = vocab_tp::rank_columns(batch.in("logits"), slots, share);
    const vocab_tp::RankLogSoftmax softmax(batch, slots, share, kind_, logits);
    if (batch.spec->pass == Pass::forward) {
      softmax.logprob(batch.out("logprob"));
      return;
    }
    const Tensor gathered = cuda_tp::gather_column_shares(
        softmax.dlogits(batch.in("dlogprob")), share.tp, static_cast<std::int64_t>(slots.size()),
        share.vocab, batch.spec->dtype);
    vocab_tp::scatter_rows(gathered, slots, batch.out("dlogits"));
  }
};

}  // namespace

void register_logprob_tp_cuda(Registry& registry) {
  for (const cuda_tp::RankOrderKind& kind : vocab_tp::cuda_kinds())
    registry.add_impl("logprob", std::make_unique<LogprobTpCuda>(kind));
}

}  // namespace bitcheck
