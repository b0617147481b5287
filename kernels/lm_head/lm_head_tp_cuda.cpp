// The vocabulary-parallel LM head on rank processes (NCCL; lm_head/lm_head_tp.h) and lm_head's CUDA
// impls over it, the twins of lm_head_tp_cpu.cpp: lm_head's logits and dtable are rank-local and
// gathered, dh sums V across the ranks in the kind's order.
#include <memory>

#include "common/adapter_support.h"
#include "common/vocab_tp_kernels.h"
#include "lm_head/lm_head.h"
#include "lm_head/lm_head_tp.h"
#include "matmul/cublaslt_gemm.h"
#include "matmul/fixed_order_gemm.h"
#include "matmul/tp_chunk_tree.h"

namespace bitcheck {
namespace lm_head_tp {
namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;
using cuda_tp::RankOrder;

constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

DeviceBuffer buffer(std::int64_t elements, DType dtype) {
  return DeviceBuffer(static_cast<std::size_t>(elements) * dtype_size(dtype) + 16);
}

// The GEMMs need V in 8 chunks of multiples of 8 entries and H a multiple of 8.
std::optional<std::string> gemm_shape_problem(const CaseSpec& spec) {
  if (spec.dim("V") % (cuda_tp::chunk_count * 8) || spec.dim("H") % 8)
    return "the fixed-order GEMMs need V a multiple of 64 (8 chunks of multiples of 8) and H a "
           "multiple of 8";
  return std::nullopt;
}

}  // namespace

RankHead::RankHead(const Batch& batch, RankOrder order)
    : order_(order),
      share_(vocab_tp::rank_share(batch)),
      hidden_(batch.spec->dim("H")),
      dtype_(batch.spec->dtype),
      table_(vocab_tp::table_share(batch, share_)) {}

DeviceBuffer RankHead::logits(const DeviceBuffer& h, std::int64_t rows) {
  DeviceBuffer out = buffer(rows * share_.width, dtype_);
  const cuda::GemmDType dtype = cs::device_dtype(dtype_);
  if (order_ == RankOrder::nccl_default) {
    cuda::lt_gemm(cuda::lt_heuristic_config(dtype, rows, share_.width, hidden_), dtype, h.get(),
                  table_->get(), out.get(), rows, share_.width, hidden_, workspace(),
                  lt_workspace_bytes, nullptr);
  } else {
    cuda::fixed_order_gemm(dtype, h.get(), table_->get(), out.get(), rows, share_.width, hidden_,
                           nullptr);
  }
  return out;
}

DeviceBuffer RankHead::input_grad(const DeviceBuffer& dlogits, std::int64_t rows) {
  record_path("split-sum");
  DeviceBuffer dh = buffer(rows * hidden_, dtype_);
  const auto count = static_cast<std::size_t>(rows * hidden_);
  const cuda::DeviceDType dtype = cs::device_dtype(dtype_);
  if (order_ == RankOrder::fixed_chunks || order_ == RankOrder::early_rounding) {
    // This rank's chunk_count / tp chunks of V (V / 8 entries each): the fixed-order GEMM on its
    // dlogits columns (read in place) and table rows (transposed to [H, width]), the chunk tree
    // finished across the ranks by the TP matmuls' routes (peer-fused from 4 MiB of subtree).
    const int per_rank = cuda_tp::chunk_count / share_.tp;
    const std::int64_t chunk = share_.vocab / cuda_tp::chunk_count;
    DeviceBuffer table_t = buffer(hidden_ * share_.width, dtype_);
    cuda::transpose_rows(dtype, false, table_->get(), hidden_, 0, share_.width, table_t.get(),
                         nullptr);
    DeviceBuffer leaves;
    cuda_tp::chunk_tree_product(order_ == RankOrder::early_rounding, dtype, dlogits.get(),
                                table_t.get(), rows, hidden_, chunk, per_rank, share_.tp, dtype,
                                dh.get(), false, leaves);
    return dh;
  }
  DeviceBuffer local = buffer(rows * hidden_, dtype_);
  if (order_ == RankOrder::nccl_default) {
    cuda::lt_gemm_nn(cuda::lt_heuristic_config_nn(dtype, rows, share_.width, hidden_), dtype,
                     dlogits.get(), table_->get(), local.get(), rows, share_.width, hidden_,
                     workspace(), lt_workspace_bytes, nullptr);
  } else {
    DeviceBuffer table_t = buffer(hidden_ * share_.width, dtype_);
    cuda::transpose_rows(dtype, false, table_->get(), hidden_, 0, share_.width, table_t.get(),
                         nullptr);
    cuda::fixed_order_gemm(dtype, dlogits.get(), table_t.get(), local.get(), rows, hidden_,
                           share_.width, nullptr);
  }
  cuda_tp::sum_rank_shares(order_, local.get(), count, dtype, share_.tp, dh.get());
  return dh;
}

void RankHead::accumulate_table_grad(const DeviceBuffer& dlogits, const DeviceBuffer& h,
                                     std::int64_t rows, Tensor& dtable) {
  record_path("local");
  DeviceBuffer mine = vocab_tp::upload_table_grad_share(dtable, share_);
  cuda::fixed_order_gemm_dw_accumulate(cs::device_dtype(dtype_), dlogits.get(), h.get(),
                                       mine.as<float>(), rows, share_.width, hidden_, nullptr);
  vocab_tp::gather_table_grad(mine, share_, dtable);
}

void* RankHead::workspace() {
  if (!workspace_.get()) workspace_ = DeviceBuffer(lt_workspace_bytes);
  return workspace_.get();
}

std::optional<std::string> HeadTpCuda::skip_reason(const CaseSpec& spec) const {
  if (auto reason = VocabTpCuda::skip_reason(spec)) return reason;
  return gemm_shape_problem(spec);
}

void HeadTpCuda::backward(Batch& batch, RankHead& head, const DeviceBuffer& dlogits,
                          const DeviceBuffer& h, const std::vector<std::int32_t>& slots) {
  const auto rows = static_cast<std::int64_t>(slots.size());
  const DeviceBuffer dh = head.input_grad(dlogits, rows);
  Tensor packed(batch.spec->dtype, {rows, batch.spec->dim("H")});
  dh.download(packed.data(), packed.bytes());
  vocab_tp::scatter_rows(packed, slots, batch.out("dh"));
  if (!batch.reductions_wanted) return;  // no check reads this layout's dtable
  head.accumulate_table_grad(dlogits, h, rows, batch.out("dtable"));
}

}  // namespace lm_head_tp

namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;
using lm_head_tp::HeadTpCuda;
using lm_head_tp::RankHead;

class LmHeadTpCuda : public HeadTpCuda {
 public:
  explicit LmHeadTpCuda(const cuda_tp::RankOrderKind& kind)
      : HeadTpCuda(kind, "V split over ranks (logits and dtable rank-local; dh sums V across them)",
                   {Pass::backward}, true) {}

  void run(Batch& batch) override {
    const cuda_tp::GemmPathsAsMembers gemm_paths(paths());
    const std::vector<std::int32_t> slots = cs::real_slot_list(batch);
    const auto rows = static_cast<std::int64_t>(slots.size());
    if (rows == 0) return;
    RankHead head(batch, kind_.order);
    const vocab_tp::RankShare& share = head.share();
    DeviceBuffer h = cs::upload(cs::compact_rows(batch.in("h"), slots));
    if (batch.spec->pass == Pass::forward) {
      record_path("local");
      const DeviceBuffer logits = head.logits(h, rows);
      vocab_tp::scatter_rows(
          cuda_tp::gather_column_shares(logits, share.tp, rows, share.vocab, batch.spec->dtype),
          slots, batch.out("logits"));
      return;
    }
    backward(batch, head, vocab_tp::rank_columns(batch.in("dlogits"), slots, share), h, slots);
  }
};

}  // namespace

void register_lm_head_tp_cuda(Registry& registry) {
  for (const cuda_tp::RankOrderKind& kind : vocab_tp::cuda_kinds())
    registry.add_impl("lm_head", std::make_unique<LmHeadTpCuda>(kind));
}

}  // namespace bitcheck
