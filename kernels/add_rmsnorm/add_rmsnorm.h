// add_rmsnorm: register_add_rmsnorm(), its one line in kernels/manifest.cpp, and its parts. Its
// impls are rmsnorm's, run on h = dtype(x + residual) (rmsnorm/rmsnorm.h).
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_add_rmsnorm(Registry& registry, OpPart part);
void register_add_rmsnorm_op(Registry& registry);    // add_rmsnorm.cpp: the OpDef
void register_add_rmsnorm_cpu(Registry& registry);   // add_rmsnorm_cpu.cpp
void register_add_rmsnorm_cuda(Registry& registry);  // add_rmsnorm_cuda.cpp (CUDA build)
}  // namespace bitcheck
