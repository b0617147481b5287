// The CUDA backend's registration, in either build: the device backend itself
// (cuda_backend_cuda.cpp), or in a CPU-only build a stand-in that makes every CUDA case skip with
// the reason and reports that no CUDA backend was built.
#include "common/cuda_backend.h"

#include <memory>

namespace bitcheck {
#if !BITCHECK_HAVE_CUDA
namespace {

class AbsentCudaBackend : public DeviceBackend {
 public:
  nlohmann::json meta() const override { return {{"cuda_backend_built", false}}; }
  double copy_bandwidth_gbps() const override { return -1.0; }
  double copy_bandwidth_gbps(double, int, int, std::size_t) const override { return -1.0; }
  std::optional<std::size_t> free_memory_bytes() const override { return std::nullopt; }
  std::optional<std::string> context_fault() const override { return std::nullopt; }
};

}  // namespace
#endif

void register_cuda_backend(Registry& registry) {
#if BITCHECK_HAVE_CUDA
  register_cuda_device_backend(registry);
#else
  registry.set_backend_status(
      "cuda", false, "bitcheck was built without the CUDA backend (no nvcc at configure time)");
  registry.set_device_backend("cuda", std::make_unique<AbsentCudaBackend>());
#endif
}

}  // namespace bitcheck
