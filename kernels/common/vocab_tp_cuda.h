// The vocabulary-parallel CUDA impls' shared host side (logprob, lm_head, lm_head_logprob with V
// split over rank processes): the kind table, a rank's share of V, the softmax statistics across
// the ranks (the row max exact, the sum of exponentials in the kind's order), logprob from the
// owner's target logit, and the base of the impls. The CUDA twins of common/vocab_tp_cpu.h.
// Host compiler, no CUDA headers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/rank_sum_cuda.h"
#include "core/op.h"

namespace bitcheck::vocab_tp {

// The kinds of the vocabulary-parallel CUDA impls, named tp-vocab-<order_name>.
const std::vector<cuda_tp::RankOrderKind>& cuda_kinds();

// This rank's share of V: `width` = V / tp consecutive entries from `first`.
struct RankShare {
  int tp = 1, rank = 0;
  std::int64_t vocab = 0, width = 0, first = 0;
};
RankShare rank_share(const Batch& batch);

// This rank's rows of the table ([V / tp, H] on the device, cached with the runner's parameter).
std::shared_ptr<const cuda::DeviceBuffer> table_share(const Batch& batch, const RankShare& share);

// This rank's rows of the fp32 dtable accumulator ([V, H] on the host), uploaded, and the ranks'
// rows gathered back into the accumulator (an exact copy) after each rank added its tokens.
cuda::DeviceBuffer upload_table_grad_share(const Tensor& dtable, const RankShare& share);
void gather_table_grad(const cuda::DeviceBuffer& mine, const RankShare& share, Tensor& dtable);

// This rank's columns [share.first, share.first + share.width) of the rows of `whole` ([slots, V]
// on the host) at `slots`, packed on the device: [slots.size(), V / tp] in its dtype.
cuda::DeviceBuffer rank_columns(const Tensor& whole, const std::vector<std::int32_t>& slots,
                                const RankShare& share);

// The log-softmax of the real rows at `slots` from this rank's logits ([rows, V / tp] on the
// device, in the case dtype): the row max all-gathered and combined (exact), the sum of
// exponentials over the 8 fixed chunks (fixed-order, early-rounding) or over each rank's share
// (the NCCL orders, the rotating chain) summed across the ranks in `order`, fp32 [rows] each and
// the same on every rank. The targets are checked against V (throws naming the id).
class RankLogSoftmax {
 public:
  RankLogSoftmax(const Batch& batch, std::vector<std::int32_t> slots, const RankShare& share,
                 const cuda_tp::RankOrderKind& kind, const cuda::DeviceBuffer& logits);
  // logprob (fp32) of each real slot into `out`: (target logit - max) - log(sum), the target logit
  // from the rank that holds it (every rank's all-gathered: an exact copy).
  void logprob(Tensor& out) const;
  // This rank's dlogits [rows, V / tp] in the case dtype: dlogprob * (onehot - p), rank-local.
  cuda::DeviceBuffer dlogits(const Tensor& dlogprob) const;

 private:
  std::vector<std::int32_t> slots_;
  std::int64_t rows_;
  RankShare share_;
  DType dtype_;
  const cuda::DeviceBuffer& logits_;
  cuda::DeviceBuffer targets_, max_, sum_;
};

// Rows of `packed` ([slots.size(), width], host) into `out` at `slots`.
void scatter_rows(const Tensor& packed, const std::vector<std::int32_t>& slots, Tensor& out);

// The ImplInfo of a vocabulary-parallel CUDA impl: tp-vocab-<order>, its claims and V split over
// the ranks from the kind. A control drifts by construction in `control_passes`, the passes whose
// sums cross the ranks; `rank_local_work`: the op also has work each rank does alone and gathers
// (a "local" path).
ImplInfo vocab_tp_info(const cuda_tp::RankOrderKind& kind, const std::string& what_is_split,
                       std::vector<Pass> control_passes, bool rank_local_work);

// The base of the vocabulary-parallel CUDA impls: the kind's order, and the early-rounding
// control skipped in fp32 (rounding to fp32 is a no-op).
class VocabTpCuda : public Impl {
 public:
  VocabTpCuda(const cuda_tp::RankOrderKind& kind, const std::string& what_is_split,
              std::vector<Pass> control_passes, bool rank_local_work)
      : Impl(vocab_tp_info(kind, what_is_split, std::move(control_passes), rank_local_work)),
        kind_(kind) {}
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override;

 protected:
  const cuda_tp::RankOrderKind& kind_;
};

}  // namespace bitcheck::vocab_tp
