// matmul: register_matmul(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_matmul(Registry& registry, OpPart part);
void register_matmul_op(Registry& registry);       // matmul.cpp: the OpDef
void register_matmul_cpu(Registry& registry);      // matmul_cpu.cpp
void register_matmul_tp_cpu(Registry& registry);   // matmul_tp_cpu.cpp: simulated ranks
void register_matmul_cuda(Registry& registry);     // matmul_cuda.cpp (CUDA build)
void register_matmul_tp_cuda(Registry& registry);  // matmul_tp_cuda.cpp (CUDA build): ranks
}  // namespace bitcheck
