// The fixed-order all-reduce over peer memory: every rank reads the other ranks' buffers directly
// (CUDA IPC over NVLink or PCIe, no NCCL on the data path) and sums each element in the one
// balanced fp32 tree over the ranks in rank order, rounded once: the bits of the gathered paths of
// common/collective_cuda.cpp, with less latency and a ring all-reduce's traffic.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/device_dtype.h"

namespace bitcheck::cuda {

// How a message is summed over peer memory.
enum class PeerShape {
  one_shot,  // every rank writes its whole message to every rank: one meeting, least latency
  two_shot,  // rank r sums part r of every message and writes it to every rank: the traffic of a
             // ring all-reduce
};

// From this many bytes a message is summed in two shots.
constexpr std::size_t peer_two_shot_from_bytes = std::size_t(512) << 10;

// The shape a message of `bytes` over `tp` ranks is summed in (`forced`, or by its size), or
// nullopt where peer memory does not take it (not whole 16-byte packs, for two shots not a whole
// number of them per rank's part, or more than 8 ranks).
std::optional<PeerShape> peer_shape(std::size_t bytes, int tp,
                                    std::optional<PeerShape> forced = std::nullopt);

// Buffers for messages of `bytes` summed in `shape`, shared with the ranks [0, tp) of the group:
// every rank constructs one together (its IPC handles are exchanged with an all-gather) and
// destroys it together. Construction throws where a peer's memory cannot be opened; `usable` says
// whether every rank opened every peer's.
class PeerSum {
 public:
  PeerSum(std::size_t bytes, int tp, PeerShape shape);
  PeerShape shape() const;
  ~PeerSum();
  PeerSum(const PeerSum&) = delete;
  PeerSum& operator=(const PeerSum&) = delete;

  // Whether every rank of the group opened every peer's buffers (agreed across the ranks), and if
  // not, why not on this rank.
  bool usable() const;
  const std::string& problem() const;

  // out = the sum over the ranks of their `send` (count elements of `dtype`, the constructor's
  // bytes), on `stream` (a cudaStream_t; nullptr: the default stream), queued without waiting.
  // Every rank calls it with the same count, in the same order of calls.
  void all_reduce(DeviceDType dtype, const void* send, void* out, std::size_t count, void* stream);

  // A TP GEMM's chunk tree finished across the ranks (cuda_tp::finish_chunk_tree): `leaves` holds
  // this rank's `leaves_per_rank` fp32 partials of `count` values ([leaf][count]); each element's
  // leaves are summed in the rank tree (the rank's subtree), the ranks' subtrees in the rank tree
  // over the ranks, rounded once to `out_dtype` into `out`: the bits of the NCCL paths, in one
  // kernel. `count` fp32 values of at most capacity_bytes(), in whole 16-byte packs (for two
  // shots, a whole number of them per rank's part). Queued without waiting.
  void finish_chunk_tree(DeviceDType out_dtype, const float* leaves, int leaves_per_rank, void* out,
                         std::size_t count, void* stream);
  // finish_chunk_tree with the rank's subtree already summed by the GEMM that made it (two shots
  // only): subtree_parts(count) says where a launch stores this rank's fp32 subtree of `count`
  // values (tp pointers: part p of the subtree, count / tp values, into rank p's staging), and
  // after that launch on `stream`, finish_written_subtree finishes the tree as finish_chunk_tree's
  // second shot does, rounded once into `out`. The same bits, without the leaves.
  std::vector<float*> subtree_parts(std::size_t count) const;
  void finish_written_subtree(DeviceDType out_dtype, void* out, std::size_t count, void* stream);
  // The constructor's bytes: the largest message (of fp32 subtree for finish_chunk_tree).
  std::size_t capacity_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace bitcheck::cuda
