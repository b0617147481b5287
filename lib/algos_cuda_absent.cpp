// Stand-ins for the cuBLASLt tuner's device half in a CPU-only build: each says the CUDA backend
// is needed.
#include <stdexcept>

#include "bitcheck/algos.h"
#include "bitcheck/algos_refine.h"

namespace bitcheck {

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
