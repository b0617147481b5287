// rope: register_rope(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_rope(Registry& registry, OpPart part);
void register_rope_op(Registry& registry);    // rope.cpp: the OpDef
void register_rope_cpu(Registry& registry);   // rope_cpu.cpp
void register_rope_cuda(Registry& registry);  // rope_cuda.cpp (CUDA build)
}  // namespace bitcheck
