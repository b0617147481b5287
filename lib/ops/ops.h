// Op definitions (tensors, FP32 Eigen reference, tolerance key), one registration function each.
#pragma once
#include "bitcheck/op.h"

namespace bitcheck {
void register_matmul_op(Registry& registry);
void register_rmsnorm_op(Registry& registry);
void register_attention_op(Registry& registry);
void register_embedding_op(Registry& registry);
void register_lm_head_op(Registry& registry);
void register_logprob_op(Registry& registry);
void register_lm_head_logprob_op(Registry& registry);
void register_elementwise_ops(Registry& registry);  // silu, gelu_tanh, gelu_erf, swiglu, residual_add, scale, cast
void register_add_rmsnorm_op(Registry& registry);
void register_rope_op(Registry& registry);
void register_chain_op(Registry& registry);  // after the ops it composes
}  // namespace bitcheck
