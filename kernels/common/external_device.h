// The CUDA backend's device memory for impls from outside bitcheck (external/external_device.h):
// cudaMalloc allocations exported through CUDA IPC, synchronous uploads and downloads, a stream of
// its own for plugin calls and CUDA-event timing on it.
#pragma once
#include <memory>

#include "external/external_device.h"

namespace bitcheck {
// external_device_cuda.cpp (CUDA build): touches the device only when first used.
std::unique_ptr<ExternalDeviceMemory> make_cuda_external_memory();
}  // namespace bitcheck
