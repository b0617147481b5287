// The tuner's device side in a build without the CUDA backend: every entry point that needs a GPU
// says so. The host side (analysis, reports, pin-table summaries) is the same in both builds.
#include <stdexcept>

#include "tuner/refine.h"
#include "tuner/search.h"

namespace bitcheck {

AlgoMeasurements measure_cublaslt_algos(const AlgosRequest&) {
  throw std::runtime_error(
      "cuBLASLt search needs the CUDA backend: bitcheck was built without it (no nvcc at configure "
      "time)");
}

RefineMeasurements measure_cublaslt_refine(const RefineRequest&) {
  throw std::runtime_error(
      "refining cuBLASLt pins needs the CUDA backend: bitcheck was built without it (no nvcc at "
      "configure time)");
}

PinVerification verify_cublaslt_pin(const RefineRequest&, const nlohmann::json&,
                                    const nlohmann::json&, const std::vector<std::int64_t>&) {
  throw std::runtime_error(
      "verifying cuBLASLt pins needs the CUDA backend: bitcheck was built without it");
}

void merge_cublaslt_pin(const std::string&, const nlohmann::json&) {
  throw std::runtime_error(
      "writing cuBLASLt pins needs the CUDA backend: bitcheck was built without it");
}

}  // namespace bitcheck
