// The sums across rank processes of the CUDA TP impls (matmul, the vocabulary ops), on the device:
// the fixed chunk tree finished across the ranks (fixed-order and the early-rounding control) and
// the ranks' shares summed by NCCL or by the rotating-chain control. Host compiler, no CUDA
// headers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/device_dtype.h"
#include "common/runtime.h"
#include "core/op.h"
#include "core/path_members.h"
#include "core/paths.h"
#include "core/tensor.h"
#include "core/tensor_parallel.h"

namespace bitcheck::cuda_tp {

// How a TP impl sums a split dim across its ranks.
enum class RankOrder {
  fixed_chunks,    // 8 fp32 chunk partials added in one fixed tree, rounded once
  early_rounding,  // control: the same tree, each rank's subtree rounded to the dtype at tp > 1
  nccl_default,    // each rank's share in the dtype, ncclAllReduce as it comes
  nccl_pinned,     // the same on the tree + Simple communicator (16 channels)
  rotating_chain,  // control: the shares all-gathered and chained from a rank the size picks
};

// One CUDA TP impl's order and what it claims: a row of the kind tables of the CUDA TP impls
// (matmul, the vocabulary ops), the twin of SplitSumKind (common/split_sum.h).
struct RankOrderKind {
  const char* order_name;  // the impl's name is "tp-<what is split>-<order_name>"
  RankOrder order;
  bool claims_invariance;
  bool library_default;
  TensorParallelism::AcrossTp across_tp;
  int drifts_from_tp;
  const char* description;
};

// The ImplInfo of a CUDA TP impl of `kind` named `name`: invariant, library default or a control
// that drifts in `control_passes` (the passes whose sums cross the ranks), on ranks that split
// `split_dims`, with its launch paths.
ImplInfo rank_order_info(const RankOrderKind& kind, std::string name, std::string description,
                         std::vector<Pass> control_passes, std::vector<std::string> split_dims,
                         std::vector<PathDecl> paths);

// The chunks' orders get this many fp32 partials over a split dim (max_tensor_parallel).
constexpr int chunk_count = 8;

// fixed_chunks and early_rounding: `leaves` holds this rank's chunk_count / tp partials of `count`
// values each ([chunk][count] fp32). They are added in the rank's subtree, the ranks' subtrees are
// all-gathered (an exact copy) and the tree finished on every rank, rounded once into `out`
// (`count` values of `dtype`): the same tree at every tp. From 512 KiB of subtree (fixed_chunks)
// each rank finishes the tree for its part of the elements only, from an all-to-all of the
// subtrees' parts, and the rounded parts are all-gathered: the same bits, less traffic. Where the
// ranks can map each other's memory (one host), fixed_chunks moves the subtrees over peer memory
// instead, the rank's subtree summed in the same kernel (common/peer_sum.h): the same bits again.
// Synchronizes (not while an nccl::Asynchronous lives: a benchmark times the queued work, as it
// does NCCL's), and returns the transport it took (the member of the "chunk-tree" path family it
// records: local, peer-one-shot, peer-two-shot, gathered or scattered).
// `over_nccl` keeps the subtrees on NCCL's transports where peer memory could take them (the path
// chunk_tree_nccl_path forces).
const char* finish_chunk_tree(bool early_rounding, const float* leaves, std::size_t count,
                              cuda::DeviceDType dtype, int tp, void* out, bool over_nccl = false);

// From this many bytes of fp32 subtree, where peer memory takes the message in two shots, a GEMM
// that can sum a rank's chunks itself stores the rank's subtree straight into the ranks' staging
// (peer_subtree_parts, then finish_peer_subtree): no fp32 leaves written and read back, and the
// first shot's traffic overlaps the GEMM.
constexpr std::size_t peer_fused_from_bytes = std::size_t(4) << 20;

// Where this rank's fp32 subtree of `count` values goes for finish_peer_subtree: part p (count / tp
// values) at parts[p], in rank p's memory. nullopt below peer_fused_from_bytes, at tp = 1, or
// where peer memory does not take the message. Every rank of the group calls it at the same call.
struct PeerSubtreeParts {
  std::vector<float*> parts;
  std::int64_t part_elements = 0;
};
std::optional<PeerSubtreeParts> peer_subtree_parts(std::size_t count, int tp);

// After a launch earlier on the default stream stored this rank's fp32 subtree at
// peer_subtree_parts(count, tp): the ranks' tree finished over peer memory, rounded once into
// `out` (`count` values of `dtype`), the bits of finish_chunk_tree. Records the "chunk-tree" member
// "peer-fused"; synchronizes as finish_chunk_tree does.
void finish_peer_subtree(std::size_t count, cuda::DeviceDType dtype, int tp, void* out);

// The forced path of the fixed-order TP matmuls whose chunk tree moves over NCCL (gathered below
// 512 KiB of fp32 subtree, scattered from there) on a host whose ranks map each other's memory.
constexpr const char* chunk_tree_nccl_path = "chunk-tree.nccl";
PathDecl chunk_tree_nccl();

// The NCCL orders and the rotating chain: the sum over the ranks of their shares (`local`, this
// rank's `count` values of `dtype`) into `out`, rounded as the transport rounds it. At tp = 1 the
// share is the sum (copied). Synchronizes.
void sum_rank_shares(RankOrder order, const void* local, std::size_t count, cuda::DeviceDType dtype,
                     int tp, void* out);

// The launch-path family of NCCL's choices per call (function.algorithm.protocol.channels),
// informative for an impl whose only collectives are all-gathers (an exact copy whatever NCCL
// chooses).
PathDecl nccl_choices(bool only_gathers);

// The fixed-order GEMM's own launch paths (a tile shape, the portable FMA path, the
// token-sequential dW), which a TP impl's GEMM calls record: an informative family "gemm" beside
// the impl's paths.
PathDecl gemm_paths();

// The GEMM paths of a TP impl's run: a PathsAsMembers of the family "gemm" over the impl's paths().
class GemmPathsAsMembers : public PathsAsMembers {
 public:
  explicit GemmPathsAsMembers(std::vector<PathDecl> own) : PathsAsMembers("gemm", std::move(own)) {}
};

// Each rank's [rows, width / tp] block of a [rows, width] matrix (`share`, on the device, in
// `dtype`), all-gathered (an exact copy) and put side by side on the host: the whole matrix on
// every rank. At tp = 1 the share is the matrix.
Tensor gather_column_shares(const cuda::DeviceBuffer& share, int tp, std::int64_t rows,
                            std::int64_t width, DType dtype);

}  // namespace bitcheck::cuda_tp
