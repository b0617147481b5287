// moe: register_moe(), its one line in kernels/manifest.cpp, its parts, and the definition an op
// built from it may use: the shape of a case, the router's per-expert bias (the skew option) and
// the routing of one token's logits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/registration.h"

namespace bitcheck {
void register_moe(Registry& registry, OpPart part);
void register_moe_op(Registry& registry);    // moe.cpp: the OpDef
void register_moe_cpu(Registry& registry);   // moe_cpu.cpp
void register_moe_cuda(Registry& registry);  // moe_cuda.cpp (CUDA build)
}  // namespace bitcheck

namespace bitcheck::moe {

// The dims of a case: H hidden, I intermediate (per expert), E experts, topk experts per token,
// and the optional hot_experts (the skew option, 0 = none).
struct Shape {
  std::int64_t hidden = 0, intermediate = 0, experts = 0, topk = 0, hot_experts = 0;
};
Shape shape_of(const CaseSpec& spec);

// Dims the op cannot mean, as a spec's bad input: {dim, what was expected}, or nullopt.
std::optional<std::pair<std::string, std::string>> dims_problem(const Dims& dims);

// The selection bias of each expert: hot_expert_bias for the hot experts, 0 elsewhere.
std::vector<float> router_bias(const Shape& shape);

// One token's routing from its router logits as the fp32 dot products x · router[e]: each rounded
// to the case dtype (the router Linear's output); the experts ranked by logit plus bias under the
// tie rule; the top-k ids in rank order and their renormalized weights (fp32, from the logits).
void route_token(const Shape& shape, DType dtype, const std::vector<float>& bias,
                 const float* dot_products, std::int32_t* ids, float* weights);

}  // namespace bitcheck::moe
