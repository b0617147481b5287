// lm_head: register_lm_head(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_lm_head(Registry& registry, OpPart part);
void register_lm_head_op(Registry& registry);       // lm_head.cpp: the OpDef
void register_lm_head_cpu(Registry& registry);      // lm_head_cpu.cpp
void register_lm_head_tp_cpu(Registry& registry);   // lm_head_tp_cpu.cpp: simulated ranks
void register_lm_head_cuda(Registry& registry);     // lm_head_cuda.cpp (CUDA build)
void register_lm_head_tp_cuda(Registry& registry);  // lm_head_tp_cuda.cpp (CUDA build): ranks
}  // namespace bitcheck
