// Registration of each op's CUDA impls (one function per op, defined beside its adapters under
// kernels/<op>/), called from cuda_backend.cpp.
#pragma once

namespace bitcheck {
class Registry;
void register_matmul_cuda(Registry& registry);
void register_rmsnorm_cuda(Registry& registry);
void register_add_rmsnorm_cuda(Registry& registry);
void register_elementwise_cuda(Registry& registry);
void register_rope_cuda(Registry& registry);
void register_embedding_cuda(Registry& registry);
void register_lm_head_cuda(Registry& registry);
void register_logprob_cuda(Registry& registry);
void register_lm_head_logprob_cuda(Registry& registry);
void register_attention_cuda(Registry& registry);
// Test-only impls that fault on purpose (BITCHECK_TEST_IMPLS=1; see bitcheck/test_impls.h).
void register_fault_cuda(Registry& registry);
}  // namespace bitcheck
