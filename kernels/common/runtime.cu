// CUDA runtime seam: device queries, buffers and event timers behind kernels/common/runtime.h.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/phase_profile.h"
#include "cuda_check.cuh"
#include "runtime.h"

namespace bitcheck::cuda {
namespace detail {

static bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // A non-sticky error (e.g. an out-of-memory cudaMalloc) stays the runtime's "last error" until
  // read: cleared here, or the next case's launch check would report this case's failure.
  if (!is_sticky(status)) cudaGetLastError();
  std::string name = cudaGetErrorName(status);
  throw CudaError(name + " (" + cudaGetErrorString(status) + ") in " + call + " at " + file + ":" +
                      std::to_string(line),
                  name, is_sticky(status));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::string name = cublasLtGetStatusName(status);
  throw CudaError(name + " (" + cublasLtGetStatusString(status) + ") in " + call + " at " + file +
                      ":" + std::to_string(line),
                  name, false);
}

}  // namespace detail

namespace {
// How this process's host threads wait for the GPU: BITCHECK_CUDA_SYNC = spin, yield, blocking or
// auto (CUDA's own choice, the default). sweep --devices sets blocking for shards sharing a GPU, so
// their waits leave the host's cores to the shards computing references (docs/usage.md). Set as the
// primary contexts' flags through the driver (cuDevicePrimaryCtxSetFlags), which creates no
// context: cudaSetDeviceFlags would create one in every process that only asks about the device (a
// shard's parent holding half a GiB of device memory for nothing).
void apply_sync_mode() {
  static const bool applied = [] {
    const char* text = std::getenv("BITCHECK_CUDA_SYNC");
    const std::string mode = text ? text : "auto";
    unsigned flags = 0;
    if (mode == "spin")
      flags = CU_CTX_SCHED_SPIN;
    else if (mode == "yield")
      flags = CU_CTX_SCHED_YIELD;
    else if (mode == "blocking")
      flags = CU_CTX_SCHED_BLOCKING_SYNC;
    else if (mode != "auto")
      throw BadInput("environment", "BITCHECK_CUDA_SYNC",
                     "spin, yield, blocking or auto, got \"" + mode + "\"");
    if (flags == 0) return true;
    void* get_device = nullptr;
    void* set_flags = nullptr;
    cudaDriverEntryPointQueryResult found{};
    int count = 0;
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &get_device, 2000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess ||
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxSetFlags", &set_flags, 11000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // no driver entry point: CUDA's own choice
      return true;
    }
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      CUdevice device = 0;
      if (reinterpret_cast<PFN_cuDeviceGet_v2000>(get_device)(&device, ordinal) == CUDA_SUCCESS)
        reinterpret_cast<PFN_cuDevicePrimaryCtxSetFlags_v11000>(set_flags)(device, flags);
    }
    return true;
  }();
  (void)applied;
}
}  // namespace

DeviceInfo query_device(int device_index) {
  apply_sync_mode();
  DeviceInfo info;
  info.device_index = device_index;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.unavailable_reason = std::string("no CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();
    return info;
  }
  if (device_index >= count) {
    info.unavailable_reason = "no CUDA device with index " + std::to_string(device_index) + " (" +
                              std::to_string(count) + " present)";
    return info;
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device_index) != cudaSuccess) {
    info.unavailable_reason = "cudaGetDeviceProperties failed";
    cudaGetLastError();
    return info;
  }
  info.available = true;
  info.name = props.name;
  info.sm_count = props.multiProcessorCount;
  info.compute_capability_major = props.major;
  info.compute_capability_minor = props.minor;
  info.total_memory_bytes = props.totalGlobalMem;
  info.l2_cache_bytes = static_cast<std::size_t>(props.l2CacheSize);
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  info.cublaslt_version = cublasLtGetVersion();
  return info;
}

void set_device(int device_index) {
  BITCHECK_CUDA_CALL(cudaSetDevice(device_index));
}
void synchronize() {
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
}

std::size_t free_device_memory() {
  release_cached_device_memory();
  std::size_t free_bytes = 0, total_bytes = 0;
  BITCHECK_CUDA_CALL(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

std::string sticky_error_after_sync() {
  cudaError_t status = cudaDeviceSynchronize();
  cudaError_t last = cudaGetLastError();
  if (status == cudaSuccess) status = last;
  if (status == cudaSuccess || !detail::is_sticky(status)) return "";
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

namespace {

// The cache of device blocks behind DeviceBuffer. A case's invocations allocate and free the same
// buffers (inputs, outputs, scratch) call after call; cudaMalloc and cudaFree cost a driver call
// each and cudaFree synchronizes the device every time, which, with a dozen processes sharing one
// GPU, makes a decode step of microseconds of work take milliseconds. Here a dead buffer's block
// is "retired"; when an allocation of its size class finds none ready but one retired, the device
// is synchronized once (all work of every stream that could touch any retired block is done) and
// every retired block becomes ready. Sizes are rounded up to 4 classes per power of two (at most
// 25% over). BITCHECK_DEVICE_CACHE_MB bounds the bytes held (default 512; 0 turns the cache off,
// as the sanitizer runs do, so initcheck sees every allocation fresh).
class BlockCache {
 public:
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache();  // never destroyed: exit frees device memory
    return *cache;
  }

  // The block size for `bytes`, or 0 when such a buffer is not cached.
  std::size_t block_bytes(std::size_t bytes) const {
    if (limit_ == 0 || bytes > limit_ / 4) return 0;
    std::size_t octave = 4096;
    while (octave * 2 <= bytes) octave *= 2;
    const std::size_t granule = std::max<std::size_t>(1024, octave / 4);
    return (bytes + granule - 1) / granule * granule;
  }

  void* take(std::size_t block) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (void* ready = pop(ready_, block)) return ready;
    if (captures_ > 0 || retired_.count(block) == 0) return nullptr;
    BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
    for (auto& [size, blocks] : retired_) {
      std::vector<void*>& into = ready_[size];
      into.insert(into.end(), blocks.begin(), blocks.end());
    }
    retired_.clear();
    return pop(ready_, block);
  }

  // False when the cache is full: the caller frees the block itself.
  bool give(void* pointer, std::size_t block) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (held_ + block > limit_) return false;
    retired_[block].push_back(pointer);
    held_ += block;
    return true;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (held_ == 0) return;
    if (captures_ == 0) BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
    for (auto* pool : {&ready_, &retired_}) {
      for (auto& [size, blocks] : *pool) {
        for (void* block : blocks) BITCHECK_CUDA_CALL_NOEXCEPT(cudaFree(block));
      }
      pool->clear();
    }
    held_ = 0;
  }

  void begin_capture() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++captures_;
  }
  void end_capture() {
    std::lock_guard<std::mutex> lock(mutex_);
    --captures_;
  }

 private:
  using Pool = std::map<std::size_t, std::vector<void*>>;

  BlockCache() {
    const char* text = std::getenv("BITCHECK_DEVICE_CACHE_MB");
    const long megabytes = text && *text ? std::strtol(text, nullptr, 10) : 512;
    limit_ = static_cast<std::size_t>(std::max(0L, megabytes)) << 20;
  }

  void* pop(Pool& pool, std::size_t block) {
    auto found = pool.find(block);
    if (found == pool.end() || found->second.empty()) return nullptr;
    void* pointer = found->second.back();
    found->second.pop_back();
    if (found->second.empty()) pool.erase(found);
    held_ -= block;
    return pointer;
  }

  std::mutex mutex_;
  std::size_t limit_ = 0, held_ = 0;
  int captures_ = 0;
  Pool ready_, retired_;
};

void* allocate(std::size_t bytes) {
  void* pointer = nullptr;
  if (cudaMalloc(&pointer, bytes) == cudaSuccess) return pointer;
  cudaGetLastError();  // out of memory: give the cache's blocks back and try once more
  BlockCache::instance().release();
  BITCHECK_CUDA_CALL(cudaMalloc(&pointer, bytes));
  return pointer;
}

}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  BlockCache& cache = BlockCache::instance();
  block_bytes_ = cache.block_bytes(bytes);
  if (block_bytes_ == 0) {
    pointer_ = allocate(bytes);
    return;
  }
  pointer_ = cache.take(block_bytes_);
  if (!pointer_) pointer_ = allocate(block_bytes_);
}
DeviceBuffer::DeviceBuffer(std::size_t bytes, Exported) : bytes_(bytes) {
  if (bytes > 0) pointer_ = allocate(bytes);
}
DeviceBuffer::~DeviceBuffer() {
  release();
}
void DeviceBuffer::release() noexcept {
  if (!pointer_) return;
  if (block_bytes_ == 0 || !BlockCache::instance().give(pointer_, block_bytes_))
    BITCHECK_CUDA_CALL_NOEXCEPT(cudaFree(pointer_));
  pointer_ = nullptr;
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(other.pointer_), bytes_(other.bytes_), block_bytes_(other.block_bytes_) {
  other.pointer_ = nullptr;
  other.bytes_ = 0;
  other.block_bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = other.pointer_;
    bytes_ = other.bytes_;
    block_bytes_ = other.block_bytes_;
    other.pointer_ = nullptr;
    other.bytes_ = 0;
    other.block_bytes_ = 0;
  }
  return *this;
}

void release_cached_device_memory() {
  BlockCache::instance().release();
}

CaptureGuard::CaptureGuard() {
  BlockCache::instance().begin_capture();
}
CaptureGuard::~CaptureGuard() {
  BlockCache::instance().end_capture();
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_)
    throw std::invalid_argument("DeviceBuffer::upload: more bytes than allocated");
  copy_to_device(pointer_, host, bytes);
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes > bytes_)
    throw std::invalid_argument("DeviceBuffer::download: more bytes than allocated");
  copy_to_host(host, pointer_, bytes);
}
void DeviceBuffer::fill_bytes(int byte_value) {
  if (bytes_) BITCHECK_CUDA_CALL(cudaMemset(pointer_, byte_value, bytes_));
}

namespace {

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* out, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float value =
        float(mix64(seed * 0x9e3779b97f4a7c15ULL + i) >> 40) * (2.0f / float(1 << 24)) - 1.0f;
    if (fabsf(value) < 1e-3f) value = 0.5f;
    out[i] = T(value);
  }
}

}  // namespace

void fill_uniform(void* data, std::size_t count, DeviceDType dtype, std::uint64_t seed) {
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((count + 255) / 256, 4096));
  switch (dtype) {
    case DeviceDType::bf16:
      fill_uniform_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(data), count, seed);
      break;
    case DeviceDType::fp16:
      fill_uniform_kernel<<<blocks, 256>>>(static_cast<__half*>(data), count, seed);
      break;
    case DeviceDType::fp32:
      fill_uniform_kernel<<<blocks, 256>>>(static_cast<float*>(data), count, seed);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void DeviceBuffer::fill_uniform(DeviceDType dtype, std::uint64_t seed) {
  cuda::fill_uniform(pointer_, bytes_ / (dtype == DeviceDType::fp32 ? 4 : 2), dtype, seed);
}

EventTimer::EventTimer() {
  cudaEvent_t start = nullptr, stop = nullptr;
  BITCHECK_CUDA_CALL(cudaEventCreate(&start));
  BITCHECK_CUDA_CALL(cudaEventCreate(&stop));
  start_event_ = start;
  stop_event_ = stop;
}
EventTimer::~EventTimer() {
  BITCHECK_CUDA_CALL_NOEXCEPT(cudaEventDestroy(static_cast<cudaEvent_t>(start_event_)));
  BITCHECK_CUDA_CALL_NOEXCEPT(cudaEventDestroy(static_cast<cudaEvent_t>(stop_event_)));
}
void EventTimer::start(void* stream) {
  BITCHECK_CUDA_CALL(
      cudaEventRecord(static_cast<cudaEvent_t>(start_event_), static_cast<cudaStream_t>(stream)));
}
float EventTimer::stop_ms(void* stream) {
  auto stop = static_cast<cudaEvent_t>(stop_event_);
  BITCHECK_CUDA_CALL(cudaEventRecord(stop, static_cast<cudaStream_t>(stream)));
  BITCHECK_CUDA_CALL(cudaEventSynchronize(stop));
  float ms = 0.f;
  BITCHECK_CUDA_CALL(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_event_), stop));
  return ms;
}

Stream::Stream() {
  cudaStream_t stream = nullptr;
  BITCHECK_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
}
Stream::~Stream() {
  BITCHECK_CUDA_CALL_NOEXCEPT(cudaStreamDestroy(static_cast<cudaStream_t>(stream_)));
}

int current_device() {
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  return device;
}

std::string ipc_memory_handle(const void* allocation) {
  cudaIpcMemHandle_t handle;
  BITCHECK_CUDA_CALL(cudaIpcGetMemHandle(&handle, const_cast<void*>(allocation)));
  return std::string(handle.reserved, sizeof handle.reserved);
}

// An upload is queued on the default stream behind the kernels before it, without waiting for
// them: from pageable memory (every upload's source is) the runtime stages the host bytes before it
// returns, so the caller may reuse them at once (the time recorded is that staging). Work on a
// non-blocking stream that reads the upload must wait for the default stream first. A download
// waits for the default stream first (the copy would wait for it anyway), so the time recorded is
// the copy's and not the kernels queued before it, which stay the impl call's.
void copy_to_device(void* device, const void* host, std::size_t bytes) {
  if (!bytes) return;
  PhaseTimer timer(Phase::uploads, bytes);
  BITCHECK_CUDA_CALL(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, nullptr));
}
void copy_to_host(void* host, const void* device, std::size_t bytes) {
  copy_to_host_all({{host, device, bytes}});
}

namespace {
constexpr std::size_t staged_download_limit = std::size_t(64) << 20;
constexpr std::size_t staging_alignment = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + staging_alignment - 1) / staging_alignment * staging_alignment;
}

// The pinned block downloads are staged in, grown as needed (never past the limit), and the two
// events that time the copies on the GPU. The object is never destroyed; the block is freed at
// exit (an atexit handler registered after the CUDA runtime's own, so it runs first), which keeps
// compute-sanitizer's leak check clean.
struct DownloadStaging {
  std::mutex mutex;
  void* block = nullptr;
  std::size_t bytes = 0;
  cudaEvent_t before = nullptr, after = nullptr;

  static DownloadStaging& instance() {
    static DownloadStaging* staging = new DownloadStaging();
    return *staging;
  }
  static void free_at_exit() {
    DownloadStaging& staging = instance();
    if (staging.block) BITCHECK_CUDA_CALL_NOEXCEPT(cudaFreeHost(staging.block));
    staging.block = nullptr;
    staging.bytes = 0;
  }
  void* reserve(std::size_t wanted) {
    if (!before) {
      BITCHECK_CUDA_CALL(cudaEventCreate(&before));
      BITCHECK_CUDA_CALL(cudaEventCreate(&after));
      std::atexit(free_at_exit);
    }
    if (wanted > bytes) {
      if (block) BITCHECK_CUDA_CALL(cudaFreeHost(block));
      block = nullptr;
      bytes = 0;
      const std::size_t size =
          std::min(staged_download_limit, std::max(wanted, std::size_t(1) << 20));
      BITCHECK_CUDA_CALL(cudaHostAlloc(&block, size, cudaHostAllocDefault));
      bytes = size;
    }
    return block;
  }
};
}  // namespace

// The download phase records the copies' own time (GPU time between the events, then the host
// copies out of staging), not the kernels queued before them, which stay the impl call's.
void copy_to_host_all(const std::vector<HostCopy>& copies) {
  std::size_t total = 0, payload = 0;
  for (const HostCopy& copy : copies) {
    total += aligned(copy.bytes);
    payload += copy.bytes;
  }
  if (payload == 0) return;
  if (total > staged_download_limit) {
    BITCHECK_CUDA_CALL(cudaStreamSynchronize(nullptr));
    PhaseTimer timer(Phase::downloads, payload);
    for (const HostCopy& copy : copies) {
      if (copy.bytes)
        BITCHECK_CUDA_CALL(cudaMemcpy(copy.host, copy.device, copy.bytes, cudaMemcpyDeviceToHost));
    }
    return;
  }
  DownloadStaging& staging = DownloadStaging::instance();
  std::lock_guard<std::mutex> lock(staging.mutex);
  auto* block = static_cast<unsigned char*>(staging.reserve(total));
  BITCHECK_CUDA_CALL(cudaEventRecord(staging.before, nullptr));
  std::size_t offset = 0;
  for (const HostCopy& copy : copies) {
    if (copy.bytes)
      BITCHECK_CUDA_CALL(cudaMemcpyAsync(block + offset, copy.device, copy.bytes,
                                         cudaMemcpyDeviceToHost, nullptr));
    offset += aligned(copy.bytes);
  }
  BITCHECK_CUDA_CALL(cudaEventRecord(staging.after, nullptr));
  BITCHECK_CUDA_CALL(cudaStreamSynchronize(nullptr));  // the one wait
  float gpu_ms = 0.f;
  BITCHECK_CUDA_CALL(cudaEventElapsedTime(&gpu_ms, staging.before, staging.after));
  const auto start = std::chrono::steady_clock::now();
  offset = 0;
  for (const HostCopy& copy : copies) {
    if (copy.bytes) std::memcpy(copy.host, block + offset, copy.bytes);
    offset += aligned(copy.bytes);
  }
  record_phase(Phase::downloads,
               gpu_ms / 1e3 +
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               payload);
}

void copy_device_to_device(void* destination, const void* source, std::size_t bytes) {
  if (bytes)
    BITCHECK_CUDA_CALL(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice));
}

double measure_copy_bandwidth_gbps(std::size_t bytes, int repeats) {
  DeviceBuffer source(bytes), destination(bytes);
  source.fill_bytes(0x3C);
  BITCHECK_CUDA_CALL(cudaMemcpy(destination.get(), source.get(), bytes, cudaMemcpyDeviceToDevice));
  EventTimer timer;
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    timer.start();
    BITCHECK_CUDA_CALL(
        cudaMemcpyAsync(destination.get(), source.get(), bytes, cudaMemcpyDeviceToDevice));
    times.push_back(timer.stop_ms());
  }
  std::sort(times.begin(), times.end());
  double median_ms = times[times.size() / 2];
  return 2.0 * static_cast<double>(bytes) / (median_ms * 1e6);
}

}  // namespace bitcheck::cuda
