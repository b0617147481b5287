// CUDA runtime seam: device queries, buffers and event timers behind kernels/common/runtime.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <vector>

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

DeviceInfo query_device(int device_index) {
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

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) BITCHECK_CUDA_CALL(cudaMalloc(&pointer_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (pointer_) BITCHECK_CUDA_CALL_NOEXCEPT(cudaFree(pointer_));
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(other.pointer_), bytes_(other.bytes_) {
  other.pointer_ = nullptr;
  other.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) BITCHECK_CUDA_CALL_NOEXCEPT(cudaFree(pointer_));
    pointer_ = other.pointer_;
    bytes_ = other.bytes_;
    other.pointer_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
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

// A host-device copy timed as the phase profile's upload or download. The default stream is
// synchronized first (the copy would wait for it anyway), so the time recorded is the copy's and
// not the kernels queued before it, which stay the impl call's.
namespace {
void profiled_copy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                   Phase phase) {
  if (!bytes) return;
  BITCHECK_CUDA_CALL(cudaStreamSynchronize(nullptr));
  PhaseTimer timer(phase, bytes);
  BITCHECK_CUDA_CALL(cudaMemcpy(destination, source, bytes, kind));
}
}  // namespace

void copy_to_device(void* device, const void* host, std::size_t bytes) {
  profiled_copy(device, host, bytes, cudaMemcpyHostToDevice, Phase::uploads);
}
void copy_to_host(void* host, const void* device, std::size_t bytes) {
  profiled_copy(host, device, bytes, cudaMemcpyDeviceToHost, Phase::downloads);
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
