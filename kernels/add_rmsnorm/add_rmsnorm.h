// add_rmsnorm: register_add_rmsnorm(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_add_rmsnorm(Registry& registry, OpPart part);
void register_add_rmsnorm_op(Registry& registry);   // add_rmsnorm.cpp: the OpDef
void register_add_rmsnorm_cpu(Registry& registry);  // add_rmsnorm_cpu.cpp
void register_add_rmsnorm_cuda(
    Registry& registry);  // rmsnorm/rmsnorm_cuda.cpp (CUDA build; one adapter serves both norms)
}  // namespace bitcheck
