// A device backend as the harness sees it: facts for the report's meta block, free memory and
// context faults for the runner, and the copy-bandwidth yardstick of bench. A backend's code
// (kernels/common/cuda_backend_cuda.cpp for CUDA) registers one with the Registry; the harness
// reaches it only through Registry::device_backend.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bitcheck {

class Registry;
class ExternalDeviceMemory;

// One process's place in a group of ranks: its rank, the group's size, and the directory the ranks
// meet in (the communicators' unique ids are exchanged there, so ranks on several nodes need a
// shared one).
struct RankGroup {
  int rank = 0;
  int size = 1;
  std::string directory;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Device and library facts for the report's meta block.
  virtual nlohmann::json meta() const = 0;
  // Device-to-device copy bandwidth (read + write) measured now, or a negative value without a
  // device.
  virtual double copy_bandwidth_gbps() const = 0;
  // The same for a copy moving `bytes_moved` bytes (half read, half written), timed like an impl's
  // benchmark: rotated buffers larger than `rotate_bytes`, `warmup` launches, median of `repeats`.
  virtual double copy_bandwidth_gbps(double bytes_moved, int warmup, int repeats,
                                     std::size_t rotate_bytes) const = 0;
  // Free device memory now, or nullopt without a device.
  virtual std::optional<std::size_t> free_memory_bytes() const = 0;
  // After a case of this backend: waits for the device and returns the error text when a sticky
  // error (illegal address, trap, launch failure) poisoned this process's context, else nullopt
  // (a non-sticky error left behind is cleared). Never throws; only call it once device work has
  // run.
  virtual std::optional<std::string> context_fault() const = 0;
  // Device memory for impls from outside bitcheck (plugins, Python functions), or nullptr where
  // the backend has no device (external/external_device.h).
  virtual ExternalDeviceMemory* external_memory() const { return nullptr; }
  // Tensor parallelism: a sweep over cases at tp > 1 starts one process per rank (one GPU each),
  // and each joins the group. Why this backend cannot, or nullopt when it can (NCCL found).
  virtual std::optional<std::string> ranks_unavailable() const {
    return std::string("the backend runs on one rank only");
  }
  virtual void join_ranks(const RankGroup& group);
  // The group this process belongs to (size 1 when it runs alone). A case at tp = P needs P ranks.
  virtual RankGroup rank_group() const { return {}; }
  // Whether every one of ranks [0, tp) passes true: the ranks of a case agree to run it (or to
  // skip it), so none waits in a collective for a rank that skipped.
  virtual bool all_ranks_agree(int tp, bool mine) { return tp == 1 ? mine : false; }
};

// Every registered device backend's meta block, under the backend's name.
nlohmann::json device_backends_meta(const Registry& registry);

}  // namespace bitcheck
