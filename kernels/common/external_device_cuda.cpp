// The CUDA backend's ExternalDeviceMemory: what plugin and Python impls get on the device. Every
// allocation is a cudaMalloc of its own (DeviceBuffer::exported), never a cached block or memory
// from a stream-ordered pool, since cudaIpcGetMemHandle exports only the former; a plugin's calls
// go on a non-blocking stream of its own, and synchronize() waits for the whole device, so the
// uploads (legacy stream) are done before a call and the call's work before the downloads.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include "common/adapter_support.h"
#include "common/external_device.h"
#include "common/graph_capture.h"
#include "common/runtime.h"

namespace bitcheck {
namespace {

class CudaExternalMemory : public ExternalDeviceMemory {
 public:
  void* allocate(std::size_t bytes) override {
    cuda::DeviceBuffer buffer(std::max<std::size_t>(bytes, 16), cuda::DeviceBuffer::exported);
    void* base = buffer.get();
    buffers_.emplace(base, std::move(buffer));
    return base;
  }
  void release(void* allocation) noexcept override { buffers_.erase(allocation); }
  void upload(void* device, const void* host, std::size_t bytes) override {
    // Done before it returns: a plugin or Python impl may read it on its own stream (stream()),
    // which does not wait for the default stream the copy is queued on.
    cuda::copy_to_device(device, host, bytes);
    cuda::synchronize();
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    cuda::copy_to_host(host, device, bytes);
  }
  void fill_random(void* device, std::size_t count, DType dtype, std::uint64_t seed) override {
    cuda::fill_uniform(device, count, cuda_support::device_dtype(dtype), seed);
  }
  std::string export_handle(void* allocation) override {
    return cuda::ipc_memory_handle(allocation);
  }
  std::string handle_kind() const override { return "cuda"; }
  int device_index() const override { return cuda::current_device(); }
  void* stream() override {
    if (!stream_) stream_ = std::make_unique<cuda::Stream>();
    return stream_->get();
  }
  void synchronize() override { cuda::synchronize(); }
  void run_captured(const std::function<void()>& launches) override {
    cuda::synchronize();  // the uploads (legacy stream) done before the replay reads them
    cuda::capture_and_replay(static_cast<CUstream_st*>(stream()),
                             [&](CUstream_st*) { launches(); });
  }
  Timing time_launches(int warmup, int repeats, const std::function<void(int)>& launch) override {
    void* on = stream();
    for (int i = 0; i < warmup; ++i) launch(i);
    cuda::synchronize();
    cuda::EventTimer timer;
    std::vector<double> times;
    for (int i = 0; i < std::max(repeats, 1); ++i) {
      timer.start(on);
      launch(warmup + i);
      times.push_back(timer.stop_ms(on));
    }
    std::sort(times.begin(), times.end());
    return {times[times.size() / 2], times.front()};
  }

 private:
  std::map<void*, cuda::DeviceBuffer> buffers_;
  std::unique_ptr<cuda::Stream> stream_;
};

}  // namespace

std::unique_ptr<ExternalDeviceMemory> make_cuda_external_memory() {
  return std::make_unique<CudaExternalMemory>();
}

}  // namespace bitcheck
