// The CUDA backend: the device's status and its DeviceBackend (device facts for the report, free
// memory, context faults, the copy yardstick, the device memory of plugin and Python impls). Each
// op registers its own CUDA impls (kernels/<op>/<op>_cuda.cpp), even without a device, so their
// cases are skipped with the reason.
#include <algorithm>
#include <memory>

#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/cuda_backend.h"
#include "common/device_inputs.h"
#include "common/device_output_cuda.h"
#include "common/external_device.h"
#include "common/kernel_recorder.h"
#include "common/nccl_ranks.h"
#include "common/runtime.h"
#include "core/backend.h"
#include "core/device_input_source.h"
#include "core/op.h"
#include "core/rng.h"
#include "run/input_generator.h"

namespace bitcheck {
namespace {

class CudaBackend : public DeviceBackend, public DeviceInputSource {
 public:
  explicit CudaBackend(const KernelRecorder& recorder) : recorder_(recorder) {}

  nlohmann::json meta() const override {
    cuda::DeviceInfo device = cuda::query_device();
    nlohmann::json meta = {{"cuda_backend_built", true}, {"device_available", device.available}};
    meta["provenance"] = {{"recording", recorder_.recording()}};
    if (!recorder_.recording()) meta["provenance"]["off_reason"] = recorder_.off_reason();
    if (!device.available) {
      meta["unavailable_reason"] = device.unavailable_reason;
      return meta;
    }
    meta["gpu_name"] = device.name;
    meta["sm_count"] = device.sm_count;
    meta["compute_capability"] = device.arch();
    meta["total_memory_bytes"] = device.total_memory_bytes;
    meta["l2_cache_bytes"] = device.l2_cache_bytes;
    meta["driver_version"] = device.driver_version;
    meta["cuda_runtime_version"] = device.runtime_version;
    meta["cublaslt_version"] = device.cublaslt_version;
    meta["nccl"] = nccl::meta();
    return meta;
  }

  // Tensor parallelism: one process per GPU, NCCL between them (common/nccl_ranks.h).
  std::optional<std::string> ranks_unavailable() const override { return nccl::unavailable(); }
  void join_ranks(const RankGroup& group) override { nccl::join(group); }
  RankGroup rank_group() const override { return nccl::group(); }
  bool all_ranks_agree(int tp, bool mine) override { return nccl::all_true(mine, tp); }

  // Uniform float row inputs generated where the impls read them (common/device_inputs.h): the
  // host generator's bits, proven by the device-check GPU tests.
  std::shared_ptr<DeviceOutput> generated_rows(const TensorDecl& decl, std::int64_t rows,
                                               std::uint64_t seed,
                                               double special_value_rate) const override {
    if (decl.generator != Generator::uniform || decl.dtype == DType::i32 || rows <= 0)
      return nullptr;
    std::int64_t width = 1;
    for (std::int64_t extent : decl.shape) width *= extent;
    const cuda::UniformInputKey key{cuda_support::device_dtype(decl.dtype), seed,
                                    hash_name(decl.name), column_scales(decl, width),
                                    special_value_rate};
    const std::size_t bytes = static_cast<std::size_t>(rows * width) * dtype_size(decl.dtype);
    cuda::DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
    cuda::generate_uniform_on_device(key, 0, rows, buffer.get(), nullptr);
    cuda::synchronize();
    return std::make_shared<cuda_support::CudaDeviceOutput>(std::move(buffer), bytes);
  }

  std::optional<std::size_t> free_memory_bytes() const override {
    static const bool available = cuda::query_device().available;
    if (!available) return std::nullopt;
    try {
      return cuda::free_device_memory();
    } catch (const cuda::CudaError&) {
      return std::nullopt;  // a poisoned context: the case runs and fails with the CUDA error
                            // itself
    }
  }

  ExternalDeviceMemory* external_memory() const override { return external_memory_.get(); }

  std::optional<std::string> context_fault() const override {
    std::string fault = cuda::sticky_error_after_sync();
    if (fault.empty()) return std::nullopt;
    return fault;
  }

  double copy_bandwidth_gbps() const override {
    if (!cuda::query_device().available) return -1.0;
    return cuda::measure_copy_bandwidth_gbps(std::size_t(1) << 30, 20);
  }

  double copy_bandwidth_gbps(double bytes_moved, int warmup, int repeats,
                             std::size_t rotate_bytes) const override {
    if (!cuda::query_device().available) return -1.0;
    BenchSettings settings;
    settings.warmup = warmup;
    settings.repeats = repeats;
    settings.rotate_bytes = rotate_bytes;
    const BenchMeasurement copy = cuda_bench::time_same_bytes_copy(bytes_moved, settings);
    return copy.bytes_moved / (copy.median_ms * 1e6);
  }

 private:
  const KernelRecorder& recorder_;  // the registry's, which outlives the backend's meta calls
  std::unique_ptr<ExternalDeviceMemory> external_memory_ = make_cuda_external_memory();
};

}  // namespace

void register_cuda_device_backend(Registry& registry) {
  cuda::DeviceInfo device = cuda::query_device();
  registry.set_backend_status("cuda", device.available, device.unavailable_reason);
  std::unique_ptr<KernelRecorder> recorder = make_cupti_kernel_recorder();
  registry.set_device_backend("cuda", std::make_unique<CudaBackend>(*recorder));
  registry.set_kernel_recorder("cuda", std::move(recorder));
}

}  // namespace bitcheck
