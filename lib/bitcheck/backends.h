// Optional backends. register_cuda_backend is defined in kernels/ when the CUDA backend is built,
// and in lib/cuda_absent.cpp otherwise (marking the backend unavailable with the reason).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace bitcheck {
class Registry;
void register_cuda_backend(Registry& registry);
// Device and library facts for the report's meta block ({} fields when no CUDA backend).
nlohmann::json cuda_backend_meta();

struct CudaBackendOptions {
  std::string pin_file = "contract/cublaslt-pins.json";  // cuBLASLt pins (read; derived when absent)
  bool write_pins = false;                               // write derived pins back at the end
};
void configure_cuda_backend(const CudaBackendOptions& options);
// End of a run: writes derived pins back when asked. Returns a note for the terminal, or "".
std::string finish_cuda_backend();
// Device-to-device copy bandwidth (read + write) measured now, or a negative value without a GPU.
double cuda_copy_bandwidth_gbps();
}  // namespace bitcheck
