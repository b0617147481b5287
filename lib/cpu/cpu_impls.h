// The CPU backend: fixed-order impls and the CPU controls, registered per op.
#pragma once
#include "bitcheck/op.h"

namespace bitcheck {
void register_matmul_cpu(Registry& registry);
void register_rmsnorm_cpu(Registry& registry);
void register_attention_cpu(Registry& registry);
void register_embedding_cpu(Registry& registry);
void register_lm_head_cpu(Registry& registry);
void register_logprob_cpu(Registry& registry);
void register_lm_head_logprob_cpu(Registry& registry);
void register_elementwise_cpu(Registry& registry);
void register_add_rmsnorm_cpu(Registry& registry);
void register_rope_cpu(Registry& registry);
}  // namespace bitcheck
