// elementwise: register_elementwise(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_elementwise(Registry& registry, OpPart part);
void register_elementwise_ops(Registry& registry);   // elementwise.cpp: the OpDef
void register_elementwise_cpu(Registry& registry);   // elementwise_cpu.cpp
void register_elementwise_cuda(Registry& registry);  // elementwise_cuda.cpp (CUDA build)
}  // namespace bitcheck
