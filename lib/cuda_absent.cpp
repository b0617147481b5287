// Stand-in for the CUDA backend in a CPU-only build: CUDA cases are skipped with this reason.
#include "bitcheck/backends.h"
#include "bitcheck/op.h"

namespace bitcheck {

void register_cuda_backend(Registry& registry) {
  registry.set_backend_status("cuda", false, "bitcheck was built without the CUDA backend (no nvcc at configure time)");
}

nlohmann::json cuda_backend_meta() {
  return {{"cuda_backend_built", false}};
}

void configure_cuda_backend(const CudaBackendOptions&) {}
std::string finish_cuda_backend() { return ""; }
double cuda_copy_bandwidth_gbps() { return -1.0; }
double cuda_copy_bandwidth_gbps(double, int, int, std::size_t) { return -1.0; }
std::optional<std::size_t> cuda_free_memory_bytes() { return std::nullopt; }
std::optional<std::string> cuda_context_fault() { return std::nullopt; }

}  // namespace bitcheck
