// Element types as the CUDA kernels see them (kept apart from lib/'s DType so .cu files include
// nothing from the host library).
#pragma once

namespace bitcheck::cuda {
enum class DeviceDType { bf16, fp16, fp32 };
}  // namespace bitcheck::cuda
