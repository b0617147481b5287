// The CUDA backend's registration: device facts for the report, and the CUDA impls of every op.
// Impls are registered even without a device so their cases are skipped with the reason.
#include "bitcheck/backends.h"
#include "bitcheck/op.h"
#include "bench_support.h"
#include "cuda_impls.h"
#include "runtime.h"
#include "tuner/pin_lookup.h"

namespace bitcheck {

void register_cuda_backend(Registry& registry) {
  cuda::DeviceInfo device = cuda::query_device();
  registry.set_backend_status("cuda", device.available, device.unavailable_reason);
  register_fault_cuda(registry);  // only with BITCHECK_TEST_IMPLS=1; first, so a sweep meets the faults before the normal cases
  register_matmul_cuda(registry);
  register_rmsnorm_cuda(registry);
  register_add_rmsnorm_cuda(registry);
  register_elementwise_cuda(registry);
  register_rope_cuda(registry);
  register_embedding_cuda(registry);
  register_lm_head_cuda(registry);
  register_logprob_cuda(registry);
  register_lm_head_logprob_cuda(registry);
  register_attention_cuda(registry);
}

nlohmann::json cuda_backend_meta() {
  cuda::DeviceInfo device = cuda::query_device();
  nlohmann::json meta = {{"cuda_backend_built", true}, {"device_available", device.available}};
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
  return meta;
}

void configure_cuda_backend(const CudaBackendOptions& options) {
  cuda::configure_pins(options.pin_file, options.write_pins);
}

std::string finish_cuda_backend() {
  cuda::write_back_pins();
  return "";
}

std::optional<std::size_t> cuda_free_memory_bytes() {
  static const bool available = cuda::query_device().available;
  if (!available) return std::nullopt;
  try {
    return cuda::free_device_memory();
  } catch (const cuda::CudaError&) {
    return std::nullopt;  // a poisoned context: the case runs and fails with the CUDA error itself
  }
}

std::optional<std::string> cuda_context_fault() {
  std::string fault = cuda::sticky_error_after_sync();
  if (fault.empty()) return std::nullopt;
  return fault;
}

double cuda_copy_bandwidth_gbps() {
  if (!cuda::query_device().available) return -1.0;
  return cuda::measure_copy_bandwidth_gbps(std::size_t(1) << 30, 20);
}

double cuda_copy_bandwidth_gbps(double bytes_moved, int warmup, int repeats, std::size_t rotate_bytes) {
  if (!cuda::query_device().available) return -1.0;
  BenchSettings settings;
  settings.warmup = warmup;
  settings.repeats = repeats;
  settings.rotate_bytes = rotate_bytes;
  const BenchMeasurement copy = cuda_bench::time_same_bytes_copy(bytes_moved, settings);
  return copy.bytes_moved / (copy.median_ms * 1e6);
}

}  // namespace bitcheck
