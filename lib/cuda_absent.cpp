// Stand-in for the CUDA backend in a CPU-only build: CUDA cases are skipped with this reason.
#include <stdexcept>

#include "bitcheck/algos.h"
#include "bitcheck/algos_refine.h"
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

AlgoMeasurements measure_cublaslt_algos(const AlgosRequest&) {
  throw std::runtime_error("cuBLASLt search needs the CUDA backend: bitcheck was built without it (no nvcc at configure time)");
}

RefineMeasurements measure_cublaslt_refine(const RefineRequest&) {
  throw std::runtime_error("refining cuBLASLt pins needs the CUDA backend: bitcheck was built without it (no nvcc at configure time)");
}

PinVerification verify_cublaslt_pin(const RefineRequest&, const nlohmann::json&, const nlohmann::json&,
                                    const std::vector<std::int64_t>&) {
  throw std::runtime_error("verifying cuBLASLt pins needs the CUDA backend: bitcheck was built without it");
}

void merge_cublaslt_pin(const std::string&, const nlohmann::json&) {
  throw std::runtime_error("writing cuBLASLt pins needs the CUDA backend: bitcheck was built without it");
}

}  // namespace bitcheck
