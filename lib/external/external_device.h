// Device tensors for impls from outside bitcheck (C ABI plugins and Python functions) on a device
// backend. A backend provides the memory operations (ExternalDeviceMemory; CUDA's lives in
// kernels/common/external_device_cuda.cpp, so lib/ stays free of CUDA); DeviceStaging decides where
// a Batch's tensors live on the device, so that the allocations another process has opened (CUDA
// IPC) stay the same from one call to the next.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"

namespace bitcheck {

// What a device backend does for an impl from outside bitcheck. Every call throws on a device
// error, with the error's text.
class ExternalDeviceMemory {
 public:
  virtual ~ExternalDeviceMemory() = default;
  // A device allocation of its own: CUDA's comes from cudaMalloc, never from a stream-ordered
  // pool, so that another process can open it through CUDA IPC.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* allocation) noexcept = 0;
  virtual void upload(void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* device, std::size_t bytes) = 0;
  // `count` elements of `dtype` (floating) at `device`: pseudo-random in [-1, 1), never zero, a
  // function of (seed, index) alone. Benchmark inputs.
  virtual void fill_random(void* device, std::size_t count, DType dtype, std::uint64_t seed) = 0;
  // What another process opens `allocation` with (CUDA: the 64 bytes of its cudaIpcMemHandle_t),
  // and how it opens it: "cuda" (cudaIpcOpenMemHandle), or "host-shm" for the host stand-in the
  // CPU tests use (the handle is the name of a POSIX shared-memory object).
  virtual std::string export_handle(void* allocation) = 0;
  virtual std::string handle_kind() const = 0;
  virtual int device_index() const = 0;
  // The stream an external impl's work goes on (a cudaStream_t; nullptr for the host stand-in).
  virtual void* stream() = 0;
  // Waits for everything queued on the device: the uploads before a call, the call's work after.
  virtual void synchronize() = 0;
  // Runs launch(i) for i = 0, 1, ... on stream(): `warmup` untimed, then `repeats` timed one by
  // one (CUDA events). Returns {median, minimum} in milliseconds.
  struct Timing {
    double median_ms = 0;
    double min_ms = 0;
  };
  virtual Timing time_launches(int warmup, int repeats, const std::function<void(int)>& launch) = 0;
  // The graph layout: `launches` (which queue their work on stream()) captured into a CUDA graph,
  // the graph replayed once and waited for. Throws CaptureUnsupported when they cannot be
  // captured, and where the memory has no CUDA graphs (the host stand-in).
  virtual void run_captured(const std::function<void()>& launches);
};

// One tensor of a call on the device: the host tensor's description, where its bytes are, and
// the allocation that holds them (another process opens the allocation, then adds the offset).
struct StagedTensor {
  std::string name;
  TensorRole role = TensorRole::row_input;
  DType dtype = DType::fp32;
  std::vector<std::int64_t> shape;  // full shape, rows first for row tensors
  void* data = nullptr;             // device pointer: allocation base + offset
  std::size_t bytes = 0;
  std::uint64_t allocation = 0;  // id of the allocation (DeviceStaging::allocation_of)
  std::size_t offset = 0;        // from the allocation's base
};

struct DeviceAllocation {
  std::uint64_t id = 0;
  void* base = nullptr;
  std::size_t bytes = 0;
  std::string handle;  // exported on first use ("" before)
};

// Where the tensors of an external impl's calls live on the device, across calls:
// - parameters in allocations of their own, kept while the runner's input id stays the same (the
//   last four), so a weight is uploaded once per case and not once per invocation;
// - row tensors and outputs in one arena reused by every call, grown (replaced) when a call needs
//   more, tensors at 256-byte aligned offsets.
// An allocation replaced or evicted is retired, not freed: a process that opened it must close it
// first (retired_handles, then release_retired).
class DeviceStaging {
 public:
  static constexpr std::size_t alignment = 256;
  static constexpr std::size_t cached_parameters = 4;

  explicit DeviceStaging(ExternalDeviceMemory& memory) : memory_(memory) {}
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // The batch's tensors on the device, in `decls` order, uploaded: inputs, and outputs as the
  // runner prepared them (row outputs NaN-poisoned, reduction outputs carrying the layout's
  // accumulator; a reduction no check reads is neither uploaded nor downloaded). Waits for the
  // uploads, so the device work of another process sees them.
  std::vector<StagedTensor> stage(Batch& batch, const std::vector<TensorDecl>& decls);
  // Copies the outputs back into the batch (after the device work that wrote them is done).
  void download_outputs(Batch& batch, const std::vector<StagedTensor>& staged);

  // Benchmark inputs: `sets` copies of every tensor of the case at spec.rows rows (no pad
  // slots), one allocation per set: floating tensors random, index tensors in [0, bound), outputs
  // zero. Freed with this staging.
  std::vector<std::vector<StagedTensor>> stage_random(const CaseSpec& spec,
                                                      const std::vector<TensorDecl>& decls,
                                                      std::size_t sets);

  const DeviceAllocation& allocation_of(const StagedTensor& tensor) const;
  // The handle of the allocation holding `tensor`, exported once per allocation.
  const std::string& handle(const StagedTensor& tensor);
  // Handles of every live allocation that was exported (a process that opened them closes them
  // before the allocations are freed).
  std::vector<std::string> exported_handles() const;
  // Handles of the allocations retired since the last release_retired() that were exported.
  std::vector<std::string> retired_handles() const;
  // Frees the retired allocations.
  void release_retired();

 private:
  DeviceAllocation& new_allocation(std::size_t bytes);
  DeviceAllocation& parameter(const Batch& batch, const TensorDecl& decl, const Tensor& tensor);
  void retire(std::uint64_t id);

  ExternalDeviceMemory& memory_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, DeviceAllocation> live_;
  std::vector<DeviceAllocation> retired_;
  std::uint64_t arena_ = 0;                           // 0: none yet
  std::vector<std::pair<std::string, std::uint64_t>>  // "name#input id" -> allocation, oldest first
      parameters_;
};

// The end of `bytes` placed at `offset`, rounded up to DeviceStaging::alignment.
std::size_t aligned_end(std::size_t offset, std::size_t bytes);

// Input sets a benchmark rotates through so that together they exceed settings.rotate_bytes (as
// bitcheck's own impls do: at most 64, and at most half of `free_bytes` when it is known).
std::size_t benchmark_sets(std::size_t set_bytes, const BenchSettings& settings,
                           std::optional<std::size_t> free_bytes);
// Bytes of one benchmark set of the case: every tensor at spec.rows rows.
std::size_t benchmark_set_bytes(const CaseSpec& spec, const std::vector<TensorDecl>& decls);

}  // namespace bitcheck
