// Attention's case model, shared by the op, the CPU impls and the CUDA adapters: a case's `rows`
// are sequences of deterministic ragged lengths; logical rows are their tokens, sequence-major.
#pragma once
#include <cstdint>
#include <vector>

#include "common/registration.h"
#include "core/op.h"

namespace bitcheck::attention {

// KV blocks of the fixed-order impls: keys are reduced in blocks of this many from position 0.
constexpr std::int64_t cpu_kv_block = 16;

// Length of each of the spec.rows sequences, in [1, L], keyed by (seed, sequence index) only.
std::vector<std::int64_t> sequence_lengths(const CaseSpec& spec);
// First logical row of each sequence, then the total token count (size rows + 1).
std::vector<std::int64_t> sequence_offsets(const CaseSpec& spec);
// 1 / sqrt(head dim), the softmax scale of every impl and the reference.
float softmax_scale(const CaseSpec& spec);
// In forward cases the queries of every odd head are uniform in [-8, 8) instead of [-1, 1)
// (TensorDecl's group_scales): scores wide enough to move the softmax's reference max mid-row.
constexpr float wide_query_scale = 8.0f;

}  // namespace bitcheck::attention

namespace bitcheck {
// attention's registration: register_attention(), its one line in kernels/manifest.cpp, and its
// parts.
void register_attention(Registry& registry, OpPart part);
void register_attention_op(Registry& registry);   // attention.cpp: the OpDef
void register_attention_cpu(Registry& registry);  // attention_cpu.cpp
// attention_tp_cpu.cpp: cpu-fixed-order on simulated ranks (head-parallel), after the CPU impls
void register_attention_tp_cpu(Registry& registry);
void register_attention_cuda(Registry& registry);  // attention_cuda.cpp (CUDA build)
// attention_tp_cuda.cpp (CUDA build): fixed-order on rank processes, after the CUDA impls
void register_attention_tp_cuda(Registry& registry);
}  // namespace bitcheck
