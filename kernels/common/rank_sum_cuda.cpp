// The TP impls' sums across rank processes: the chunk tree's last levels after an all-gather of
// the ranks' subtrees, NCCL's all-reduce, and the rotating chain over all-gathered shares.
#include "common/rank_sum_cuda.h"

#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/adapter_support.h"
#include "common/gathered_sum.h"
#include "common/nccl_ranks.h"
#include "common/peer_sum.h"
#include "common/rank_sum.h"
#include "common/split_sum.h"
#include "core/dtype.h"

namespace bitcheck::cuda_tp {
namespace {

std::size_t element_bytes(cuda::DeviceDType dtype) {
  return dtype == cuda::DeviceDType::fp32 ? 4 : 2;
}

// From this many bytes of fp32 subtree the chunk tree's last levels are summed part by part (the
// collectives' fixed-order scattered path starts at the same size); below, one all-gather has the
// lower latency.
constexpr std::size_t scattered_from_bytes = std::size_t(512) << 10;

// Scratch for the chunk tree's subtree and gathered subtrees, kept across calls and grown as
// needed: at prefill sizes they are larger than the device block cache holds, and a fresh
// cudaMalloc and cudaFree (which synchronizes the device) each call cost more than the sum. One
// rank process calls it from one thread; every call ends synchronized, or (under an
// nccl::Asynchronous) queued on the default stream ahead of the next call's use, so the next may
// reuse it.
void* scratch(int slot, std::size_t bytes) {
  static cuda::DeviceBuffer* buffers[3] = {nullptr, nullptr, nullptr};  // never freed at all
  cuda::DeviceBuffer*& buffer = buffers[slot];
  if (!buffer || buffer->bytes() < bytes) {
    delete buffer;
    buffer = nullptr;
    buffer = new cuda::DeviceBuffer(bytes);
  }
  return buffer->get();
}

// The chunk tree over peer memory, one per (tp, shape), grown to the largest message and kept:
// every rank of the group makes and grows it at the same call, as their messages are the same.
// Never freed (its destructor meets the other ranks, which have gone by the time a process exits).
// nullptr where a peer's memory cannot be mapped: then NCCL moves the subtrees.
cuda::PeerSum* peer_tree(int tp, cuda::PeerShape shape, std::size_t bytes) {
  static std::map<std::pair<int, int>, cuda::PeerSum*> sums;
  cuda::PeerSum*& sum = sums[{tp, static_cast<int>(shape)}];
  if (!sum || sum->capacity_bytes() < bytes) {
    delete sum;
    sum = nullptr;
    // One shot: every message below the two-shot size; two shots: grown in whole MiB.
    const std::size_t mib = std::size_t(1) << 20;
    const std::size_t capacity = shape == cuda::PeerShape::one_shot ? cuda::peer_two_shot_from_bytes
                                                                    : (bytes + mib - 1) / mib * mib;
    sum = new cuda::PeerSum(capacity, tp, shape);
  }
  return sum->usable() ? sum : nullptr;
}

}  // namespace

const char* finish_chunk_tree(bool early_rounding, const float* leaves, std::size_t count,
                              cuda::DeviceDType dtype, int tp, void* out, bool over_nccl) {
  const int per_rank = chunk_count / tp;
  const bool round_subtree = early_rounding && tp > 1;
  if (over_nccl && tp > 1) record_path(chunk_tree_nccl_path);
  // Peer memory where it can be mapped: the rank's subtree and the ranks' tree in one kernel, one
  // shot below 512 KiB of fp32 subtree, two shots (the scattered path's traffic) from there.
  if (tp > 1 && !round_subtree && !over_nccl) {
    const std::size_t fp32_bytes = count * sizeof(float);
    if (const std::optional<cuda::PeerShape> shape = cuda::peer_shape(fp32_bytes, tp)) {
      if (cuda::PeerSum* peer = peer_tree(tp, *shape, fp32_bytes)) {
        const char* member =
            *shape == cuda::PeerShape::one_shot ? "peer-one-shot" : "peer-two-shot";
        record_path_member("chunk-tree", member);
        peer->finish_chunk_tree(dtype, leaves, per_rank, out, count, nullptr);
        if (nccl::waits()) cuda::synchronize();
        return member;
      }
    }
  }
  const cuda::DeviceDType subtree_dtype = round_subtree ? dtype : cuda::DeviceDType::fp32;
  const std::size_t subtree_bytes = count * element_bytes(subtree_dtype);
  void* gathered = scratch(0, subtree_bytes * static_cast<std::size_t>(tp) + 16);
  // At tp = 1 the subtree is the whole tree: summed straight into the gathered slot.
  void* subtree = tp > 1 ? scratch(1, subtree_bytes + 16) : gathered;
  if (round_subtree) {
    cuda::sum_gathered_fp32_tree(dtype, leaves, subtree, count, per_rank, nullptr);
  } else {
    cuda::sum_gathered_fixed_tree(cuda::DeviceDType::fp32, leaves, subtree, count, per_rank,
                                  nullptr);
  }
  const std::size_t part = count / static_cast<std::size_t>(tp);
  const bool scattered = tp > 1 && !round_subtree && count % static_cast<std::size_t>(tp) == 0 &&
                         subtree_bytes >= scattered_from_bytes;
  const char* member = tp == 1 ? "local" : scattered ? "scattered" : "gathered";
  record_path_member("chunk-tree", member);
  if (scattered) {
    // Rank r takes the r-th part of every rank's subtree (an all-to-all of exact copies, laid out
    // rank by rank as the all-gather lays out whole subtrees), finishes the tree for that part,
    // and the rounded parts are all-gathered: each element summed as on the gathered path below,
    // with (tp - 1) / tp of the fp32 subtree and of the rounded result moved instead of tp - 1
    // whole fp32 subtrees.
    void* part_sum = scratch(2, part * element_bytes(dtype) + 16);
    nccl::all_to_all(subtree, gathered, part, cuda::DeviceDType::fp32, tp, nccl::library_default());
    cuda::sum_gathered_fp32_tree(dtype, static_cast<const float*>(gathered), part_sum, part, tp,
                                 nullptr);
    nccl::all_gather(part_sum, out, part, dtype, tp, nccl::library_default());
    if (nccl::waits()) cuda::synchronize();
    return member;
  }
  if (tp > 1)
    nccl::all_gather(subtree, gathered, count, subtree_dtype, tp, nccl::library_default());
  if (round_subtree) {
    cuda::sum_gathered_fixed_tree(dtype, gathered, out, count, tp, nullptr);
  } else {
    cuda::sum_gathered_fp32_tree(dtype, static_cast<const float*>(gathered), out, count, tp,
                                 nullptr);
  }
  if (nccl::waits()) cuda::synchronize();
  return member;
}

std::optional<PeerSubtreeParts> peer_subtree_parts(std::size_t count, int tp) {
  const std::size_t bytes = count * sizeof(float);
  if (tp < 2 || bytes < peer_fused_from_bytes ||
      cuda::peer_shape(bytes, tp) != cuda::PeerShape::two_shot)
    return std::nullopt;
  cuda::PeerSum* peer = peer_tree(tp, cuda::PeerShape::two_shot, bytes);
  if (!peer) return std::nullopt;
  return PeerSubtreeParts{peer->subtree_parts(count),
                          static_cast<std::int64_t>(count / static_cast<std::size_t>(tp))};
}

void finish_peer_subtree(std::size_t count, cuda::DeviceDType dtype, int tp, void* out) {
  cuda::PeerSum* peer = peer_tree(tp, cuda::PeerShape::two_shot, count * sizeof(float));
  if (!peer) throw std::logic_error("finish_peer_subtree: no peer memory for this message");
  record_path_member("chunk-tree", "peer-fused");
  peer->finish_written_subtree(dtype, out, count, nullptr);
  if (nccl::waits()) cuda::synchronize();
}

void sum_rank_shares(RankOrder order, const void* local, std::size_t count, cuda::DeviceDType dtype,
                     int tp, void* out) {
  const std::size_t bytes = count * element_bytes(dtype);
  if (tp == 1) {
    cuda::copy_device_to_device(out, local, bytes);
    cuda::synchronize();
    return;
  }
  if (order == RankOrder::rotating_chain) {
    cuda::DeviceBuffer gathered(bytes * static_cast<std::size_t>(tp) + 16);
    nccl::all_gather(local, gathered.get(), count, dtype, tp, nccl::library_default());
    cuda::sum_gathered_chain(dtype, gathered.get(), out, count, tp,
                             rotating_start(static_cast<std::int64_t>(count), tp), nullptr);
    cuda::synchronize();
    return;
  }
  nccl::all_reduce_sum(
      local, out, count, dtype, tp,
      order == RankOrder::nccl_default ? nccl::library_default() : nccl::tree_simple());
}

ImplInfo rank_order_info(const RankOrderKind& kind, std::string name, std::string description,
                         std::vector<Pass> control_passes, std::vector<std::string> split_dims,
                         std::vector<PathDecl> paths) {
  ImplInfo info = kind.claims_invariance
                      ? ImplInfo::invariant(std::move(name), "cuda", std::move(description))
                  : kind.library_default
                      ? ImplInfo::library_default(std::move(name), "cuda", std::move(description))
                      : ImplInfo::control(std::move(name), "cuda", std::move(description));
  if (kind.order == RankOrder::fixed_chunks || kind.order == RankOrder::early_rounding) {
    // How finish_chunk_tree moved the subtrees: a switch by message size that must change no bit.
    PathDecl tree("chunk-tree",
                  "the chunk tree's last levels: local (tp = 1), over peer memory in one "
                  "kernel (peer-one-shot; peer-two-shot from 512 KiB of fp32 subtree; "
                  "peer-fused from 4 MiB in the TP matmuls and lm_head's dh: the rank's subtree "
                  "summed and sent by its GEMM), or where "
                  "peer memory cannot be mapped by NCCL: gathered (whole subtrees all-gathered) "
                  "or scattered (parts all-to-all, from 512 KiB)");
    tree.as_family();
    tree.informative();
    paths.push_back(tree);
  }
  info.drifting_in(std::move(control_passes))
      .on_ranks(split_parallelism(kind.across_tp, kind.drifts_from_tp, std::move(split_dims)))
      .with_paths(std::move(paths));
  return info;
}

PathDecl chunk_tree_nccl() {
  return PathDecl(chunk_tree_nccl_path,
                  "the chunk tree's subtrees moved by NCCL (all-gather; from 512 KiB of fp32 "
                  "subtree all-to-all parts and an all-gather) where peer memory would take them: "
                  "the transport of ranks on several nodes, forced on one host")
      .only_forced();
}

PathDecl nccl_choices(bool only_gathers) {
  PathDecl nccl("nccl", "what NCCL chose per call: function.algorithm.protocol.channels");
  nccl.as_family();
  if (only_gathers) nccl.informative();
  return nccl;
}

PathDecl gemm_paths() {
  PathDecl gemm("gemm", "the fixed-order GEMM's path per call (tile shape, portable FMA, dW)");
  gemm.as_family();
  gemm.informative();
  return gemm;
}

Tensor gather_column_shares(const cuda::DeviceBuffer& share, int tp, std::int64_t rows,
                            std::int64_t width, DType dtype) {
  Tensor whole(dtype, {rows, width});
  if (tp == 1) {
    cuda::synchronize();
    share.download(whole.data(), whole.bytes());
    return whole;
  }
  Tensor gathered(dtype, {tp * rows, width / tp});  // [tp][rows][width / tp], rank by rank
  cuda::DeviceBuffer all(gathered.bytes() + 16);
  nccl::all_gather(share.get(), all.get(), static_cast<std::size_t>(rows * (width / tp)),
                   cuda_support::device_dtype(dtype), tp, nccl::library_default());
  all.download(gathered.data(), gathered.bytes());
  const std::size_t block = static_cast<std::size_t>(width / tp) * dtype_size(dtype);
  for (int rank = 0; rank < tp; ++rank) {
    for (std::int64_t row = 0; row < rows; ++row) {
      std::memcpy(static_cast<std::byte*>(whole.data()) +
                      (static_cast<std::size_t>(row) * tp + static_cast<std::size_t>(rank)) * block,
                  static_cast<const std::byte*>(gathered.data()) +
                      (static_cast<std::size_t>(rank) * static_cast<std::size_t>(rows) +
                       static_cast<std::size_t>(row)) *
                          block,
                  block);
    }
  }
  return whole;
}

}  // namespace bitcheck::cuda_tp
