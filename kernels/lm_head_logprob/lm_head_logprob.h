// lm_head_logprob: register_lm_head_logprob(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_lm_head_logprob(Registry& registry, OpPart part);
void register_lm_head_logprob_op(Registry& registry);       // lm_head_logprob.cpp: the OpDef
void register_lm_head_logprob_cpu(Registry& registry);      // lm_head_logprob_cpu.cpp
void register_lm_head_logprob_tp_cpu(Registry& registry);   // lm_head_logprob_tp_cpu.cpp: ranks
void register_lm_head_logprob_cuda(Registry& registry);     // lm_head_logprob_cuda.cpp (CUDA build)
void register_lm_head_logprob_tp_cuda(Registry& registry);  // lm_head_logprob_tp_cuda.cpp (CUDA)
}  // namespace bitcheck
