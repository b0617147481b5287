// rmsnorm: register_rmsnorm(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_rmsnorm(Registry& registry, OpPart part);
void register_rmsnorm_op(Registry& registry);    // rmsnorm.cpp: the OpDef
void register_rmsnorm_cpu(Registry& registry);   // rmsnorm_cpu.cpp
void register_rmsnorm_cuda(Registry& registry);  // rmsnorm_cuda.cpp (CUDA build)
}  // namespace bitcheck
