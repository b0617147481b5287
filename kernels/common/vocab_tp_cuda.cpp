// The vocabulary-parallel CUDA impls' shared host side: the kinds, a rank's share, the softmax
// statistics across the ranks and logprob from the owners' target logits.
#include "common/vocab_tp_cuda.h"

#include <cstring>

#include "common/adapter_support.h"
#include "common/nccl_ranks.h"
#include "common/vocab_device.h"
#include "common/vocab_ops.h"
#include "common/vocab_tp_kernels.h"

namespace bitcheck::vocab_tp {
namespace {

using cuda::DeviceBuffer;
using cuda_tp::RankOrder;

DeviceBuffer floats(std::int64_t count) {
  return DeviceBuffer(static_cast<std::size_t>(count) * sizeof(float) + 16);
}

// [tp][rows] fp32: every rank's `local` values, rank by rank (at tp = 1, this rank's).
DeviceBuffer all_ranks(const DeviceBuffer& local, std::int64_t rows, int tp) {
  if (tp == 1) {
    DeviceBuffer copy = floats(rows);
    cuda::copy_device_to_device(copy.get(), local.get(), static_cast<std::size_t>(rows) * 4);
    return copy;
  }
  DeviceBuffer gathered = floats(rows * tp);
  nccl::all_gather(local.get(), gathered.get(), static_cast<std::size_t>(rows),
                   cuda::DeviceDType::fp32, tp, nccl::library_default());
  return gathered;
}

// The naive TP pair: NCCL's pinned sum of the ranks' shares, claiming nothing, whose shares are
// plain index-order sums (its CPU twin's arithmetic).
bool plain_sums(const cuda_tp::RankOrderKind& kind) {
  return kind.order == RankOrder::nccl_pinned && !kind.claims_invariance;
}

// The sum of exponentials over V of each row: the fixed chunks' tree, or the ranks' shares summed.
DeviceBuffer sum_of_exponentials(const cuda_tp::RankOrderKind& kind, cuda::DeviceDType dtype,
                                 const void* logits, std::int64_t rows, const RankShare& share,
                                 const float* max) {
  const RankOrder order = kind.order;
  DeviceBuffer sum = floats(rows);
  const auto count = static_cast<std::size_t>(rows);
  if (order != RankOrder::fixed_chunks && order != RankOrder::early_rounding) {
    DeviceBuffer local = floats(rows);
    cuda::vocab_chunk_sums(dtype, logits, rows, share.width, share.vocab, share.first, share.tp,
                           share.rank, 1, max, plain_sums(kind), local.as<float>(), nullptr);
    cuda_tp::sum_rank_shares(order, local.get(), count, cuda::DeviceDType::fp32, share.tp,
                             sum.get());
    return sum;
  }
  const int per_rank = cuda_tp::chunk_count / share.tp;
  DeviceBuffer leaves = floats(rows * per_rank);
  cuda::vocab_chunk_sums(dtype, logits, rows, share.width, share.vocab, share.first,
                         cuda_tp::chunk_count, share.rank * per_rank, per_rank, max, false,
                         leaves.as<float>(), nullptr);
  if (order == RankOrder::fixed_chunks) {
    cuda_tp::finish_chunk_tree(false, leaves.as<float>(), count, cuda::DeviceDType::fp32, share.tp,
                               sum.get());
    return sum;
  }
  // The early-rounding control keeps the sum in the case dtype.
  DeviceBuffer rounded(count * 4 + 16);
  cuda_tp::finish_chunk_tree(true, leaves.as<float>(), count, dtype, share.tp, rounded.get());
  cuda::widen_to_fp32(dtype, rounded.get(), sum.as<float>(), rows, nullptr);
  return sum;
}

}  // namespace

const std::vector<cuda_tp::RankOrderKind>& cuda_kinds() {
  static const std::vector<cuda_tp::RankOrderKind> kinds = {
      {"fixed-order", RankOrder::fixed_chunks, true, false, TensorParallelism::AcrossTp::claimed, 1,
       "each sum over V in 8 fixed chunks (the exponentials: one block per chunk, in an order "
       "fixed by the chunk's length; dh: each chunk by the fixed-order GEMM in fp32), a rank's "
       "chunks added in its subtree, the subtrees all-gathered and the tree finished on every "
       "rank, rounded once: the same bits at every tp; the row max and the target logit exact"},
      {"nccl-default", RankOrder::nccl_default, false, true, TensorParallelism::AcrossTp::observed,
       1,
       "each rank's share (its GEMMs by cuBLASLt's heuristic) summed by ncclAllReduce as it comes, "
       "in fp32 for the exponentials and in the dtype for dh: the library default, observed"},
      {"nccl-tree-simple", RankOrder::nccl_pinned, true, false,
       TensorParallelism::AcrossTp::observed, 1,
       "each rank's share (fixed-order GEMMs) summed by ncclAllReduce on the tree + Simple "
       "communicator (16 channels): fixed in the batch, not across TP sizes"},
      {"early-rounding", RankOrder::early_rounding, false, false,
       TensorParallelism::AcrossTp::expected_to_drift, 2,
       "control: the fixed-order tree with each rank's subtree rounded to the case dtype before "
       "the all-gather (the exponentials' sum kept in the dtype), so tp > 1 differs from tp = 1"},
      {"naive-pair", RankOrder::nccl_pinned, false, false,
       TensorParallelism::AcrossTp::expected_to_drift, 2,
       "control: the naive TP pair, one plain index-order sum over V at tp = 1 against each "
       "rank's share summed in index order and the shares added by NCCL (tree + Simple) at "
       "tp > 1, held to tp = 1's bits; dh as nccl-tree-simple"},
      {"rotating-chain", RankOrder::rotating_chain, false, false,
       TensorParallelism::AcrossTp::observed, 3,
       "control: the ranks' shares all-gathered and summed in a chain from a rank that a hash of "
       "the message size picks (at 3 or more ranks)"},
  };
  return kinds;
}

RankShare rank_share(const Batch& batch) {
  RankShare share;
  share.tp = batch.tp;
  share.rank = batch.tp > 1 ? nccl::group().rank : 0;
  share.vocab = batch.spec->dim("V");
  share.width = share.vocab / share.tp;
  share.first = share.rank * share.width;
  return share;
}

std::shared_ptr<const DeviceBuffer> table_share(const Batch& batch, const RankShare& share) {
  const auto rows = [share](const Tensor& table) {
    Tensor mine(table.dtype(), {share.width, table.shape()[1]});
    std::memcpy(mine.data(),
                static_cast<const std::byte*>(table.data()) + mine.bytes() * share.rank,
                mine.bytes());
    return mine;
  };
  return vocab_device::shared_parameter(
      batch, "table", rows, "rows " + std::to_string(share.rank) + "/" + std::to_string(share.tp));
}

DeviceBuffer upload_table_grad_share(const Tensor& dtable, const RankShare& share) {
  const std::size_t bytes = dtable.bytes() / static_cast<std::size_t>(share.tp);
  return cuda_support::upload_bytes(
      static_cast<const std::byte*>(dtable.data()) + bytes * static_cast<std::size_t>(share.rank),
      bytes);
}

void gather_table_grad(const DeviceBuffer& mine, const RankShare& share, Tensor& dtable) {
  const Tensor whole =
      cuda_tp::gather_column_shares(mine, share.tp, 1, dtable.numel(), DType::fp32);
  std::memcpy(dtable.data(), whole.data(), whole.bytes());
}

DeviceBuffer rank_columns(const Tensor& whole, const std::vector<std::int32_t>& slots,
                          const RankShare& share) {
  const auto rows = static_cast<std::int64_t>(slots.size());
  DeviceBuffer all = cuda_support::upload(whole), slot_list = cuda_support::upload(slots);
  DeviceBuffer mine(static_cast<std::size_t>(rows * share.width) * dtype_size(whole.dtype()) + 16);
  cuda::gather_columns(cuda_support::device_dtype(whole.dtype()), false, all.get(), share.vocab,
                       slot_list.as<std::int32_t>(), rows, share.first, share.width, mine.get(),
                       nullptr);
  return mine;
}

RankLogSoftmax::RankLogSoftmax(const Batch& batch, std::vector<std::int32_t> slots,
                               const RankShare& share, const cuda_tp::RankOrderKind& kind,
                               const DeviceBuffer& logits)
    : slots_(std::move(slots)),
      rows_(static_cast<std::int64_t>(slots_.size())),
      share_(share),
      dtype_(batch.spec->dtype),
      logits_(logits),
      max_(floats(rows_)) {
  const Tensor& targets = batch.in("target");
  std::vector<std::int32_t> checked;
  for (std::int32_t slot : slots_) {
    checked.push_back(static_cast<std::int32_t>(checked_target(
        targets, slot, share_.vocab, batch.spec->op + " at slot " + std::to_string(slot))));
  }
  targets_ = cuda_support::upload(checked);
  const cuda::DeviceDType dtype = cuda_support::device_dtype(dtype_);
  DeviceBuffer local_max = floats(rows_);
  cuda::vocab_row_max(dtype, logits_.get(), rows_, share_.width, local_max.as<float>(), nullptr);
  const DeviceBuffer maxima = all_ranks(local_max, rows_, share_.tp);
  cuda::vocab_combine_max(maxima.as<float>(), rows_, share_.tp, max_.as<float>(), nullptr);
  sum_ = sum_of_exponentials(kind, dtype, logits_.get(), rows_, share_, max_.as<float>());
}

void RankLogSoftmax::logprob(Tensor& out) const {
  DeviceBuffer local = floats(rows_);
  cuda::vocab_target_logits(cuda_support::device_dtype(dtype_), logits_.get(), rows_, share_.width,
                            share_.first, targets_.as<std::int32_t>(), local.as<float>(), nullptr);
  const DeviceBuffer owners = all_ranks(local, rows_, share_.tp);
  DeviceBuffer result = floats(rows_);
  cuda::vocab_logprob(owners.as<float>(), targets_.as<std::int32_t>(), rows_, share_.width,
                      max_.as<float>(), sum_.as<float>(), result.as<float>(), nullptr);
  cuda::synchronize();
  Tensor packed(DType::fp32, {rows_, 1});
  result.download(packed.data(), packed.bytes());
  scatter_rows(packed, slots_, out);
}

DeviceBuffer RankLogSoftmax::dlogits(const Tensor& dlogprob) const {
  DeviceBuffer upstream = cuda_support::upload(cuda_support::compact_rows(dlogprob, slots_));
  DeviceBuffer out(static_cast<std::size_t>(rows_ * share_.width) * dtype_size(dtype_) + 16);
  cuda::vocab_dlogits(cuda_support::device_dtype(dtype_), logits_.get(), rows_, share_.width,
                      share_.first, targets_.as<std::int32_t>(), upstream.as<float>(),
                      max_.as<float>(), sum_.as<float>(), out.get(), nullptr);
  return out;
}

void scatter_rows(const Tensor& packed, const std::vector<std::int32_t>& slots, Tensor& out) {
  for (std::size_t i = 0; i < slots.size(); ++i)
    out.copy_row_from(packed, static_cast<std::int64_t>(i), slots[i]);
}

std::optional<std::string> VocabTpCuda::skip_reason(const CaseSpec& spec) const {
  if (kind_.order == RankOrder::early_rounding && spec.dtype == DType::fp32)
    return "the early-rounding control rounds partials to the case dtype: a no-op in fp32";
  return std::nullopt;
}

ImplInfo vocab_tp_info(const cuda_tp::RankOrderKind& kind, const std::string& what_is_split,
                       std::vector<Pass> control_passes, bool rank_local_work) {
  std::vector<PathDecl> paths = {
      PathDecl("split-sum", "a sum over V whose shares the ranks hold, reduced across them"),
      cuda_tp::nccl_choices(false)};
  if (rank_local_work) {
    paths.push_back(PathDecl("local", "rank-local work (logits, dtable), gathered"));
    paths.push_back(cuda_tp::gemm_paths());
  }
  return cuda_tp::rank_order_info(kind, std::string("tp-vocab-") + kind.order_name,
                                  what_is_split + ": " + kind.description,
                                  std::move(control_passes), {"V"}, std::move(paths));
}

}  // namespace bitcheck::vocab_tp
