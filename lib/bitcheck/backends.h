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
}  // namespace bitcheck
