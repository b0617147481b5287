// Input dtype of the GEMM kernels (cuBLASLt and fixed-order); plain C++, shared by both headers.
#pragma once

namespace bitcheck::cuda {
enum class GemmDType { bf16, fp16, fp32 };
}  // namespace bitcheck::cuda
