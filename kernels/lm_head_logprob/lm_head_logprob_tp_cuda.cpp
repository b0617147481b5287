// CUDA impls of lm_head_logprob with the vocabulary split over rank processes (NCCL), the twins of
// lm_head_logprob_tp_cpu.cpp: each rank's logits by the vocabulary-parallel LM head
// (lm_head/lm_head_tp.h), the softmax statistics and the target logit reduced across the ranks
// (common/vocab_tp_cuda.h), dh summed across them in the kind's order, dtable rank-local.
#include <memory>

#include "common/adapter_support.h"
#include "lm_head/lm_head_tp.h"
#include "lm_head_logprob/lm_head_logprob.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;
using lm_head_tp::HeadTpCuda;
using lm_head_tp::RankHead;

class LmHeadLogprobTpCuda : public HeadTpCuda {
 public:
  explicit LmHeadLogprobTpCuda(const cuda_tp::RankOrderKind& kind)
      : HeadTpCuda(kind,
                   "V split over ranks (rank-local logits; the softmax statistics, the target "
                   "logit and dh reduced across them; dtable rank-local)",
                   {Pass::forward, Pass::backward}, true) {}

  void run(Batch& batch) override {
    const cuda_tp::GemmPathsAsMembers gemm_paths(paths());
    const std::vector<std::int32_t> slots = cs::real_slot_list(batch);
    const auto rows = static_cast<std::int64_t>(slots.size());
    if (rows == 0) return;
    record_path("split-sum");
    RankHead head(batch, kind_.order);
    DeviceBuffer h = cs::upload(cs::compact_rows(batch.in("h"), slots));
    const DeviceBuffer logits = head.logits(h, rows);
    const vocab_tp::RankLogSoftmax softmax(batch, slots, head.share(), kind_, logits);
    if (batch.spec->pass == Pass::forward) {
      softmax.logprob(batch.out("logprob"));
      return;
    }
    backward(batch, head, softmax.dlogits(batch.in("dlogprob")), h, slots);
  }
};

}  // namespace

void register_lm_head_logprob_tp_cuda(Registry& registry) {
  for (const cuda_tp::RankOrderKind& kind : vocab_tp::cuda_kinds())
    registry.add_impl("lm_head_logprob", std::make_unique<LmHeadLogprobTpCuda>(kind));
}

}  // namespace bitcheck
