// CUDA runtime seam for host C++: device queries, device buffers, streams and event timing,
// declared without CUDA headers so lib/ and the impl adapters compile with the host compiler.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_dtype.h"

namespace bitcheck::cuda {

// A failed CUDA or cuBLASLt call. `sticky` marks errors that poison the context
// (illegal address, trap, launch failure): no later call in this process can be trusted.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, std::string error_name, bool sticky)
      : std::runtime_error(message), error_name_(std::move(error_name)), sticky_(sticky) {}
  const std::string& error_name() const { return error_name_; }
  bool sticky() const { return sticky_; }

 private:
  std::string error_name_;
  bool sticky_;
};

struct DeviceInfo {
  bool available = false;
  std::string unavailable_reason;  // set when !available
  int device_index = 0;
  std::string name;
  int sm_count = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  std::size_t total_memory_bytes = 0;
  std::size_t l2_cache_bytes = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
  std::size_t cublaslt_version = 0;
  std::string arch() const {  // e.g. "sm_90"
    return "sm_" + std::to_string(compute_capability_major) +
           std::to_string(compute_capability_minor);
  }
};

// Never throws: a machine without a GPU gives available=false and a reason.
DeviceInfo query_device(int device_index = 0);
void set_device(int device_index);
void synchronize();
std::size_t free_device_memory();
// Synchronizes the device and returns the text of a sticky error that poisoned the context ("" when
// none); clears a non-sticky error left behind. Never throws.
std::string sticky_error_after_sync();

// Owning device allocation. Moves only. Small and medium buffers come from a per-process cache
// of cudaMalloc blocks (see release_cached_device_memory): a buffer's block goes back to it when
// the buffer dies and is handed out again only after a device-wide synchronize, so work still
// queued on any stream can never see its memory reused, as with cudaFree. Buffers another process
// maps (CUDA IPC) take `exported`: a cudaMalloc of their own, freed with cudaFree.
class DeviceBuffer {
 public:
  struct Exported {};
  static constexpr Exported exported{};

  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(std::size_t bytes, Exported);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  void fill_bytes(int byte_value);  // e.g. 0xFF poisons a float output with NaN
  // Every element (bytes / element size of `dtype`): fill_uniform below.
  void fill_uniform(DeviceDType dtype, std::uint64_t seed);
  void* get() const { return pointer_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(pointer_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;

  void* pointer_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t block_bytes_ = 0;  // the cached block's size; 0: an allocation of its own
};

// Frees every block the buffer cache holds (synchronizing the device first). free_device_memory()
// does this before it measures, so a case's memory check sees what the process could allocate.
void release_cached_device_memory();

// While > 0, the buffer cache neither synchronizes nor reuses blocks (a stream capture is open:
// a device synchronize would invalidate it). capture_and_replay holds it.
class CaptureGuard {
 public:
  CaptureGuard();
  ~CaptureGuard();
  CaptureGuard(const CaptureGuard&) = delete;
  CaptureGuard& operator=(const CaptureGuard&) = delete;
};

// `count` elements of `dtype` at `data`, pseudo-random, uniform in [-1, 1), never zero: element i
// is a function of (seed, i) alone. Benchmark and search inputs: tensor-core and exp-heavy kernels
// draw less power on constant data and would run faster than on real activations. Queued on the
// default stream.
void fill_uniform(void* data, std::size_t count, DeviceDType dtype, std::uint64_t seed);

// Times device work with CUDA events, on the default stream or on `stream` (a cudaStream_t).
// Milliseconds.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(void* stream = nullptr);
  float stop_ms(void* stream = nullptr);  // synchronizes on the stop event

 private:
  void* start_event_ = nullptr;
  void* stop_event_ = nullptr;
};

// A non-blocking stream of its own (cudaStreamNonBlocking), destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }  // the cudaStream_t

 private:
  void* stream_ = nullptr;
};

// The device this thread uses (cudaGetDevice).
int current_device();
// The 64 bytes of the CUDA IPC handle (cudaIpcMemHandle_t) of `allocation`, the base of a
// cudaMalloc allocation: another process opens it with cudaIpcOpenMemHandle.
std::string ipc_memory_handle(const void* allocation);
// Copies between host and device memory on the legacy default stream: an upload is queued (the
// host bytes are staged before it returns), a download is complete when it returns.
void copy_to_device(void* device, const void* host, std::size_t bytes);
void copy_to_host(void* host, const void* device, std::size_t bytes);

// Device-to-host copies behind one wait for the GPU: queued into pinned staging memory behind the
// kernels before them, waited for once, then copied out. With a dozen processes time-slicing one
// GPU each wait costs their slices, so an impl downloading several outputs per call (a decode step)
// waits once, not once per output. Copies of more than 64 MiB in all go one by one, as
// copy_to_host does.
struct HostCopy {
  void* host;
  const void* device;
  std::size_t bytes;
};
void copy_to_host_all(const std::vector<HostCopy>& copies);

// Asynchronous device-to-device copy on the default stream (what the copy benchmarks time).
void copy_device_to_device(void* destination, const void* source, std::size_t bytes);

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured now.
double measure_copy_bandwidth_gbps(std::size_t bytes, int repeats);

}  // namespace bitcheck::cuda
