// Optional backends. register_cuda_backend is defined in kernels/ when the CUDA backend is built,
// and in lib/cuda_absent.cpp otherwise (marking the backend unavailable with the reason).
#pragma once
#include <cstddef>
#include <optional>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace bitcheck {
class Registry;
void register_cuda_backend(Registry& registry);
// Device and library facts for the report's meta block ({} fields when no CUDA backend).
nlohmann::json cuda_backend_meta();

struct CudaBackendOptions {
  std::string pin_file = "contract/pins";  // cuBLASLt pin directory or file (read; derived when absent)
  bool write_pins = false;                               // write derived pins back at the end
};
void configure_cuda_backend(const CudaBackendOptions& options);
// End of a run: writes derived pins back when asked. Returns a note for the terminal, or "".
std::string finish_cuda_backend();
// Device-to-device copy bandwidth (read + write) measured now, or a negative value without a GPU.
double cuda_copy_bandwidth_gbps();
// The same for a copy moving `bytes_moved` bytes (half read, half written), timed like an impl's
// benchmark: rotated buffers larger than `rotate_bytes`, `warmup` launches, median of `repeats`.
double cuda_copy_bandwidth_gbps(double bytes_moved, int warmup, int repeats, std::size_t rotate_bytes);
// Free device memory now (cudaMemGetInfo), or nullopt without a device.
std::optional<std::size_t> cuda_free_memory_bytes();
// After a CUDA case: waits for the device and returns the error text when a sticky error (illegal
// address, trap, launch failure) poisoned this process's CUDA context, else nullopt (a non-sticky
// error left behind is cleared). Never throws; only call it once CUDA work has run.
std::optional<std::string> cuda_context_fault();
}  // namespace bitcheck
