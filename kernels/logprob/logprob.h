// logprob: register_logprob(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_logprob(Registry& registry, OpPart part);
void register_logprob_op(Registry& registry);       // logprob.cpp: the OpDef
void register_logprob_cpu(Registry& registry);      // logprob_cpu.cpp
void register_logprob_tp_cpu(Registry& registry);   // logprob_tp_cpu.cpp: simulated ranks
void register_logprob_cuda(Registry& registry);     // logprob_cuda.cpp (CUDA build)
void register_logprob_tp_cuda(Registry& registry);  // logprob_tp_cuda.cpp (CUDA build): ranks
}  // namespace bitcheck
