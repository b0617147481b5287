// CUDA impls of embedding with the vocabulary split over rank processes (NCCL), the twins of
// embedding_tp_cpu.cpp: rank r holds table rows [r * V / tp, (r + 1) * V / tp) and looks up the
// ids it owns into a [slots, H] buffer of zeros. fixed-order all-gathers the ranks' lookups (an
// exact copy) and takes every row from the rank that owns its id: no addition, so a -0 keeps its
// sign at every tp. nccl-default and nccl-tree-simple sum the lookups with ncclAllReduce, as
// Megatron's masked fill + all-reduce does: exact but for -0 + +0 = +0 and a NaN's payload, which
// a device addition need not keep. dtable is rank-local (the fixed-order id segments over the
// rank's rows) and gathered.
#include <memory>

#include "common/adapter_support.h"
#include "common/nccl_ranks.h"
#include "common/split_sum.h"
#include "common/vocab_device.h"
#include "common/vocab_tp_cuda.h"
#include "core/path_members.h"
#include "embedding/embedding.h"
#include "embedding_kernels.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;

enum class Combine { owner_row, nccl_default, nccl_pinned };

struct EmbeddingTpCudaKind {
  const char* name;
  Combine combine;
  const char* description;
};

constexpr EmbeddingTpCudaKind kinds[] = {
    {"tp-vocab-fixed-order", Combine::owner_row,
     "V split over ranks: each rank looks up the ids it owns; the lookups all-gathered and every "
     "row taken from the rank that owns its id (no addition: a -0 and a NaN's payload reach the "
     "output at every tp); dtable rank-local in (id, token order), gathered"},
    {"tp-vocab-nccl-default", Combine::nccl_default,
     "V split over ranks: the lookups (the non-owners' rows +0) summed by ncclAllReduce as it "
     "comes, the library default: exact but for -0, which comes out +0 at tp > 1, and a NaN's "
     "payload; dtable rank-local"},
    {"tp-vocab-nccl-tree-simple", Combine::nccl_pinned,
     "V split over ranks: the lookups (the non-owners' rows +0) summed by ncclAllReduce on the "
     "tree + Simple communicator: exact but for -0, which comes out +0 at tp > 1, and a NaN's "
     "payload; dtable rank-local"},
};

ImplInfo info_of(const EmbeddingTpCudaKind& kind) {
  const bool owner_row = kind.combine == Combine::owner_row;
  ImplInfo info = kind.combine == Combine::nccl_default
                      ? ImplInfo::library_default(kind.name, "cuda", kind.description)
                      : ImplInfo::invariant(kind.name, "cuda", kind.description);
  info.on_ranks(split_parallelism(owner_row ? TensorParallelism::AcrossTp::claimed
                                            : TensorParallelism::AcrossTp::observed,
                                  1, {"V"}))
      .with_paths(
          {PathDecl("lookup", "forward: the owned ids looked up, combined across the ranks"),
           PathDecl("dtable.id-segments", "dtable: the rank's ids, tokens in token order"),
           cuda_tp::nccl_choices(owner_row),
           PathDecl("kernel", "the one-GPU embedding kernel's path per call (gather)")
               .as_family()
               .informative()});
  return info;
}

class EmbeddingTpCuda : public Impl {
 public:
  explicit EmbeddingTpCuda(const EmbeddingTpCudaKind& kind) : Impl(info_of(kind)), kind_(kind) {}

  void run(Batch& batch) override {
    const PathsAsMembers kernel_paths("kernel", paths());  // the lookup kernel's "gather"
    const vocab_tp::RankShare share = vocab_tp::rank_share(batch);
    if (batch.spec->pass == Pass::backward) {
      if (!batch.reductions_wanted) return;  // no check reads this layout's dtable
      record_path("dtable.id-segments");
      Tensor& dtable = batch.out("dtable");
      DeviceBuffer mine = vocab_tp::upload_table_grad_share(dtable, share);
      DeviceBuffer dout = cs::upload(batch.in("dout"));
      embedding_table_grad_on_device(batch, share.first, share.first + share.width, dout.get(),
                                     mine.as<float>());
      vocab_tp::gather_table_grad(mine, share, dtable);
      return;
    }
    record_path("lookup");
    const std::vector<std::int32_t> slots = cs::real_slot_list(batch);
    const std::vector<std::int32_t> ids = checked_ids(batch, slots);
    const DeviceBuffer lookups = look_up_owned(batch, share, slots, ids);
    const std::int64_t hidden = batch.spec->dim("H");
    Tensor& out = batch.out("out");
    if (kind_.combine == Combine::owner_row) {
      const Tensor all = cuda_tp::gather_column_shares(lookups, share.tp, 1, share.tp * out.numel(),
                                                       batch.spec->dtype);
      const Tensor by_rank = reshaped(all, share.tp * batch.slots(), hidden);
      for (std::size_t i = 0; i < slots.size(); ++i) {
        const std::int64_t owner = ids[i] / share.width;
        out.copy_row_from(by_rank, owner * batch.slots() + slots[i], slots[i]);
      }
      return;
    }
    DeviceBuffer sum(out.bytes() + 16);
    const auto count = static_cast<std::size_t>(out.numel());
    if (share.tp == 1) {
      cuda::copy_device_to_device(sum.get(), lookups.get(), out.bytes());
      cuda::synchronize();
    } else {
      nccl::all_reduce_sum(
          lookups.get(), sum.get(), count, cs::device_dtype(batch.spec->dtype), share.tp,
          kind_.combine == Combine::nccl_default ? nccl::library_default() : nccl::tree_simple());
    }
    Tensor summed(batch.spec->dtype, out.shape());
    sum.download(summed.data(), summed.bytes());
    for (std::int32_t slot : slots) out.copy_row_from(summed, slot, slot);
  }

 private:
  // The ids of the real slots, checked against V.
  static std::vector<std::int32_t> checked_ids(const Batch& batch,
                                               const std::vector<std::int32_t>& slots) {
    std::vector<std::int32_t> checked;
    for (std::int32_t slot : slots) checked.push_back(checked_token_id(batch, slot));
    return checked;
  }

  // [slots, H] in the dtype: the table rows of the ids this rank owns, zeros elsewhere.
  static DeviceBuffer look_up_owned(const Batch& batch, const vocab_tp::RankShare& share,
                                    const std::vector<std::int32_t>& slots,
                                    const std::vector<std::int32_t>& ids) {
    const std::int64_t hidden = batch.spec->dim("H");
    std::vector<std::int32_t> local_ids(static_cast<std::size_t>(batch.slots()), 0), owned;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (ids[i] < share.first || ids[i] >= share.first + share.width) continue;
      local_ids[static_cast<std::size_t>(slots[i])] =
          static_cast<std::int32_t>(ids[i] - share.first);
      owned.push_back(slots[i]);
    }
    DeviceBuffer lookups(
        static_cast<std::size_t>(batch.slots() * hidden) * dtype_size(batch.spec->dtype) + 16);
    lookups.fill_bytes(0);
    const auto table = vocab_tp::table_share(batch, share);
    DeviceBuffer local_ids_device = cs::upload(local_ids), owned_device = cs::upload(owned);
    vocab_device::ErrorRecord error;
    cuda::embedding_gather(cs::device_dtype(batch.spec->dtype), local_ids_device.as<std::int32_t>(),
                           owned_device.as<std::int32_t>(), static_cast<std::int64_t>(owned.size()),
                           table->get(), share.width, hidden, lookups.get(), error.get(), nullptr);
    error.check("embedding", share.width);
    return lookups;
  }

  // The same bits as [rows, width].
  static Tensor reshaped(const Tensor& tensor, std::int64_t rows, std::int64_t width) {
    Tensor result(tensor.dtype(), {rows, width});
    std::copy_n(static_cast<const std::byte*>(tensor.data()), tensor.bytes(),
                static_cast<std::byte*>(result.data()));
    return result;
  }

  const EmbeddingTpCudaKind& kind_;
};

}  // namespace

void register_embedding_tp_cuda(Registry& registry) {
  for (const EmbeddingTpCudaKind& kind : kinds)
    registry.add_impl("embedding", std::make_unique<EmbeddingTpCuda>(kind));
}

}  // namespace bitcheck
