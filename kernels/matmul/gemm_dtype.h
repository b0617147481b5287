// Element type of the GEMM kernels: the backend-wide device dtype.
#pragma once
#include "common/device_dtype.h"

namespace bitcheck::cuda {
using GemmDType = DeviceDType;
}  // namespace bitcheck::cuda
