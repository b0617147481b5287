// Kernel provenance on the CUDA backend: CUPTI's activity API records every kernel the process
// launches (name, grid, block, shared memory). CUPTI is opened with dlopen when a run asks for
// provenance, so bitcheck runs where it is absent, with provenance off and the reason stated.
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/kernel_recorder.h"
#include "common/runtime.h"

#ifndef BITCHECK_CUPTI_LIBRARY
#define BITCHECK_CUPTI_LIBRARY "libcupti.so"
#endif

namespace bitcheck {
namespace {

constexpr std::size_t activity_buffer_bytes = std::size_t(4) << 20;

// The CUPTI calls bitcheck makes, looked up in the library it opened.
struct CuptiFunctions {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;  // optional
};

// What CUPTI's buffer callback (any thread) hands over: kernels with their correlation ids (the
// order of their launch calls) and start times.
struct Record {
  std::uint32_t correlation = 0;
  std::uint64_t start = 0;
  KernelLaunch launch;
};
struct CompletedRecords {
  std::mutex mutex;
  std::vector<Record> launches;
};
CompletedRecords completed;
CuptiFunctions cupti;  // set once the library is open; the callbacks read next_record

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, activity_buffer_bytes));
  *size = *buffer ? activity_buffer_bytes : 0;
  *max_records = 0;  // as many as fit
}

KernelLaunch launch_of(const CUpti_ActivityKernel10& kernel) {
  KernelLaunch launch;
  launch.name = readable_kernel_name(kernel.name ? kernel.name : "(unnamed)");
  launch.grid = {kernel.gridX, kernel.gridY, kernel.gridZ};
  launch.block = {kernel.blockX, kernel.blockY, kernel.blockZ};
  launch.shared_bytes = std::int64_t{kernel.staticSharedMemory} + kernel.dynamicSharedMemory;
  launch.dynamic_shared_bytes = kernel.dynamicSharedMemory;
  return launch;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  std::vector<Record> launches;
  CUpti_Activity* record = nullptr;
  while (cupti.next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    // Newer CUPTI versions append fields to the kernel record; the ones read here stay in place.
    const auto& kernel = *reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    launches.push_back({kernel.correlationId, kernel.start, launch_of(kernel)});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(completed.mutex);
  for (auto& launch : launches) completed.launches.push_back(std::move(launch));
}

template <typename Function>
bool look_up(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  return function != nullptr;
}

class CuptiKernelRecorder : public KernelRecorder {
 public:
  std::optional<std::string> start() override {
    if (recording_) return std::nullopt;
    off_reason_ = why_not_started();
    recording_ = off_reason_.empty();
    if (recording_) return std::nullopt;
    return off_reason_;
  }

  void stop() override {
    if (recording_) {
      cupti.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      take();
    }
    recording_ = false;
    off_reason_ = "not asked for (--provenance)";
  }

  bool recording() const override { return recording_; }
  std::string off_reason() const override { return off_reason_; }

  // The previous take waited for the device, and the runner launches nothing between calls: a
  // kernel that started before this point is not the call's. So the call's start time is noted
  // and earlier records dropped when the take comes, instead of waiting for the device and
  // flushing here as well.
  void begin() override {
    if (!recording_) return;
    std::uint64_t now = 0;
    if (cupti.timestamp && cupti.timestamp(&now) == CUPTI_SUCCESS) {
      started_ = now;
      return;
    }
    take();
  }

  std::vector<KernelLaunch> take() override {
    if (!recording_) return {};
    // An error of the impl's own kernels is the impl's to report, and the runner's context check
    // after the case sees a sticky one: the records are flushed whatever the synchronization says.
    (void)cudaDeviceSynchronize();
    cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<Record> launches;
    {
      std::lock_guard<std::mutex> lock(completed.mutex);
      launches.swap(completed.launches);
    }
    std::stable_sort(launches.begin(), launches.end(), [](const Record& a, const Record& b) {
      return a.correlation < b.correlation;
    });
    std::vector<KernelLaunch> ordered;  // by correlation id: the order of the launch calls
    // Kernels of earlier calls ended before the take that followed them; the call's first kernel
    // starts microseconds after begin (its launch and the upload before it). The 2 us allowed
    // below begin cover CUPTI's GPU-to-host clock conversion.
    constexpr std::uint64_t clock_allowance_ns = 2000;
    const std::uint64_t from = started_ > clock_allowance_ns ? started_ - clock_allowance_ns : 0;
    for (Record& record : launches) {
      if (record.start >= from) ordered.push_back(std::move(record.launch));
    }
    started_ = 0;
    return ordered;
  }

 private:
  // "" once CUPTI records kernels, else why it does not.
  std::string why_not_started() {
    if (!cuda::query_device().available) return "no CUDA device";
    if (std::string failure = open_library(); !failure.empty()) return failure;
    if (!callbacks_registered_) {
      const CUptiResult result = cupti.register_callbacks(buffer_requested, buffer_completed);
      if (result != CUPTI_SUCCESS) return "cuptiActivityRegisterCallbacks: " + text_of(result);
      callbacks_registered_ = true;
    }
    const CUptiResult result = cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (result != CUPTI_SUCCESS) return "cuptiActivityEnable: " + text_of(result);
    return "";
  }

  // BITCHECK_CUPTI_LIBRARY names the library; else the one the build found, then the loader's.
  std::string open_library() {
    if (library_) return "";
    const char* chosen = std::getenv("BITCHECK_CUPTI_LIBRARY");
    std::vector<std::string> candidates;
    if (chosen)
      candidates = {chosen};
    else
      candidates = {BITCHECK_CUPTI_LIBRARY, "libcupti.so.13", "libcupti.so"};
    for (const std::string& candidate : candidates) {
      library_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library_) break;
    }
    if (!library_) {
      return "CUPTI not found (" + candidates.front() +
             "): install the CUDA toolkit's CUPTI or name it with BITCHECK_CUPTI_LIBRARY";
    }
    CuptiFunctions found;
    const bool complete =
        look_up(library_, "cuptiActivityRegisterCallbacks", found.register_callbacks) &&
        look_up(library_, "cuptiActivityEnable", found.enable) &&
        look_up(library_, "cuptiActivityDisable", found.disable) &&
        look_up(library_, "cuptiActivityFlushAll", found.flush_all) &&
        look_up(library_, "cuptiActivityGetNextRecord", found.next_record) &&
        look_up(library_, "cuptiGetResultString", found.result_string);
    if (!complete) {
      dlclose(library_);
      library_ = nullptr;
      return "the CUPTI library found lacks the activity API";
    }
    look_up(library_, "cuptiGetTimestamp", found.timestamp);
    cupti = found;
    return "";
  }

  static std::string text_of(CUptiResult result) {
    const char* text = nullptr;
    if (cupti.result_string(result, &text) != CUPTI_SUCCESS || !text)
      return "CUPTI error " + std::to_string(static_cast<int>(result));
    return text;
  }

  void* library_ = nullptr;
  bool callbacks_registered_ = false;
  bool recording_ = false;
  std::uint64_t started_ = 0;  // begin()'s time: kernels that started before it are not the call's
  std::string off_reason_ = "not asked for (--provenance)";
};

}  // namespace

std::unique_ptr<KernelRecorder> make_cupti_kernel_recorder() {
  return std::make_unique<CuptiKernelRecorder>();
}

}  // namespace bitcheck
