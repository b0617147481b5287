// Element type of the GEMM kernels: the backend-wide device dtype.
#pragma once
#include "../device_dtype.h"

namespace bitcheck::cuda {
using GemmDType = DeviceDType;
}  // namespace bitcheck::cuda
