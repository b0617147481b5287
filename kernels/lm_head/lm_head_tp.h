// The vocabulary-parallel LM head of one rank process (CUDA build; lm_head_tp_cuda.cpp): its table
// rows on the device and the three products over them, and the base of the impls built on it
// (lm_head's and lm_head_logprob's). Plain C++ header, no CUDA headers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/vocab_tp_cuda.h"

namespace bitcheck::lm_head_tp {

// Rank r holds table rows [r * V / tp, (r + 1) * V / tp); its logits are rank-local (the
// fixed-order GEMM, or cuBLASLt's heuristic for nccl-default). dh = dlogits · table sums over V: in
// 8 chunks by the fixed-order GEMM in fp32 finished in the fixed tree (fixed-order,
// early-rounding), or each rank's share in the dtype summed by NCCL or the rotating chain. dtable
// is rank-local (one FMA per token in token order) and gathered.
class RankHead {
 public:
  RankHead(const Batch& batch, cuda_tp::RankOrder order);

  const vocab_tp::RankShare& share() const { return share_; }
  // logits [rows, V / tp] = h [rows, H] · this rank's table rowsᵀ, in the dtype.
  cuda::DeviceBuffer logits(const cuda::DeviceBuffer& h, std::int64_t rows);
  // dh [rows, H] = dlogits [rows, V] · table, V split over the ranks and summed across them in
  // the kind's order; `dlogits` holds this rank's columns [rows, V / tp].
  cuda::DeviceBuffer input_grad(const cuda::DeviceBuffer& dlogits, std::int64_t rows);
  // dtable [V, H] (fp32, carried across invocations) += dlogitsᵀ · h over the packed rows in
  // token order: each rank its rows, then gathered.
  void accumulate_table_grad(const cuda::DeviceBuffer& dlogits, const cuda::DeviceBuffer& h,
                             std::int64_t rows, Tensor& dtable);

 private:
  void* workspace();

  cuda_tp::RankOrder order_;
  vocab_tp::RankShare share_;
  std::int64_t hidden_;
  DType dtype_;
  std::shared_ptr<const cuda::DeviceBuffer> table_;
  cuda::DeviceBuffer workspace_;
};

// The base of the impls over a RankHead: the GEMMs' shape needs, and the backward from this
// rank's dlogits.
class HeadTpCuda : public vocab_tp::VocabTpCuda {
 public:
  using VocabTpCuda::VocabTpCuda;
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override;

 protected:
  // dh (summed across the ranks) into the real slots of the output, and this rank's dtable rows.
  static void backward(Batch& batch, RankHead& head, const cuda::DeviceBuffer& dlogits,
                       const cuda::DeviceBuffer& h, const std::vector<std::int32_t>& slots);
};

}  // namespace bitcheck::lm_head_tp
