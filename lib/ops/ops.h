// Op definitions (tensors, FP32 Eigen reference, tolerance key), one registration function each.
#pragma once
#include "bitcheck/op.h"

namespace bitcheck {
void register_matmul_op(Registry& registry);
void register_rmsnorm_op(Registry& registry);
}  // namespace bitcheck
