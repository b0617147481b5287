// lm_head_logprob: register_lm_head_logprob(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_lm_head_logprob(Registry& registry, OpPart part);
void register_lm_head_logprob_op(Registry& registry);      // lm_head_logprob.cpp: the OpDef
void register_lm_head_logprob_cpu(Registry& registry);     // lm_head_logprob_cpu.cpp
void register_lm_head_logprob_tp_cpu(Registry& registry);  // lm_head_logprob_tp_cpu.cpp: ranks
// The CUDA adapters share the LM-head GEMMs (CUDA build): lm_head/lm_head_cuda.cpp, and
// lm_head/lm_head_tp_cuda.cpp over rank processes.
void register_lm_head_logprob_cuda(Registry& registry);
void register_lm_head_logprob_tp_cuda(Registry& registry);
}  // namespace bitcheck
