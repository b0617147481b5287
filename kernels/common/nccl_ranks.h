// NCCL for the CUDA impls of tensor parallelism, without NCCL or CUDA headers: the library as this
// process found it (loaded at run time: the CUDA toolkit's, or PyTorch's on the GPU machines), the
// group of rank processes this one joined, communicators over ranks [0, tp) with NCCL's own choices
// or with its algorithm, protocol and channels pinned, and the collectives, each recording what
// NCCL chose (algorithm, protocol, channels) as a launch path through the profiler plugin.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/device_dtype.h"
#include "core/backend.h"

namespace bitcheck::nccl {

// Why NCCL cannot be used here (no libnccl.so.2 found, or too old), or nullopt.
// BITCHECK_NCCL_LIBRARY names the library to load; otherwise the dynamic loader's search path
// decides.
std::optional<std::string> unavailable();
// Version, library path, whether the path recorder (the profiler plugin) is loaded, and the NCCL_*
// variables in force: for the report's meta.
nlohmann::json meta();

// This process's place in the group of ranks (one per GPU; CUDA_VISIBLE_DEVICES names its GPU).
void join(const RankGroup& group);
const RankGroup& group();

// How a communicator is set up. NCCL reads NCCL_ALGO and NCCL_PROTO when a communicator is created
// (they are set around its creation only); the channels are the communicator's CTA bounds.
struct CommSettings {
  std::string name;       // "default", "tree-simple"
  std::string algorithm;  // NCCL_ALGO for the communicator ("" = NCCL's choice)
  std::string protocol;   // NCCL_PROTO ("" = NCCL's choice)
  int channels = 0;       // min = max CTAs (0 = NCCL's choice)
};
// NCCL as it comes: its tuner picks the algorithm, protocol and channels per call.
CommSettings library_default();
// What inference engines set (NCCL_ALGO=allreduce:tree, NCCL_PROTO=Simple), channels pinned too.
CommSettings tree_simple();

// The collectives, over ranks [0, tp) of the group, on `stream` (a cudaStream_t; nullptr: the
// default stream), synchronized before they return. Sums are NCCL's, in the dtype.
void all_reduce_sum(const void* send, void* receive, std::size_t count, cuda::DeviceDType dtype,
                    int tp, const CommSettings& settings, void* stream = nullptr);
// Rank r receives elements [r * count / tp, (r + 1) * count / tp) of the sum of the ranks' sends.
void reduce_scatter_sum(const void* send, void* receive, std::size_t count, cuda::DeviceDType dtype,
                        int tp, const CommSettings& settings, void* stream = nullptr);
// Every rank receives the ranks' `count_per_rank` elements, rank by rank: an exact copy.
void all_gather(const void* send, void* receive, std::size_t count_per_rank,
                cuda::DeviceDType dtype, int tp, const CommSettings& settings,
                void* stream = nullptr);
// Rank r sends its `count_per_rank` elements at [p * count_per_rank, ...) to rank p and receives
// rank p's r-th part at [p * count_per_rank, ...): grouped sends and receives, exact copies.
void all_to_all(const void* send, void* receive, std::size_t count_per_rank,
                cuda::DeviceDType dtype, int tp, const CommSettings& settings,
                void* stream = nullptr);
// While it lives, the collectives above return without waiting for the device and record no
// paths: a benchmark times the queued work with CUDA events.
class Asynchronous {
 public:
  Asynchronous();
  ~Asynchronous();
  Asynchronous(const Asynchronous&) = delete;
  Asynchronous& operator=(const Asynchronous&) = delete;
};
// Whether the collectives above, and the TP impls' sums that use them (common/rank_sum_cuda.h),
// wait for the device before they return: false while an Asynchronous lives.
bool waits();
// Whether every rank of [0, tp) passes true.
bool all_true(bool mine, int tp);

}  // namespace bitcheck::nccl
