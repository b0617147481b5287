// The CUDA backend's registration: its status (available, or the reason it is not) and its
// DeviceBackend (core/backend.h).
#pragma once
#include "core/op.h"

namespace bitcheck {
// cuda_backend.cpp: in a CPU-only build, marks the backend unavailable and registers a stand-in
// that has no device; in a CUDA build, calls register_cuda_device_backend.
void register_cuda_backend(Registry& registry);
// cuda_backend_cuda.cpp (CUDA build): the device's status and the CUDA DeviceBackend.
void register_cuda_device_backend(Registry& registry);
}  // namespace bitcheck
