// The manifest: every op and impl is registered here, explicitly, in a fixed order (the order the
// status matrix and "first failing op" use).
#include "bitcheck/backends.h"
#include "bitcheck/op.h"
#include "bitcheck/test_impls.h"
#include "cpu/cpu_impls.h"
#include "ops/chain.h"
#include "ops/ops.h"

namespace bitcheck {

void register_ops_and_cpu(Registry& registry) {
  register_matmul_op(registry);
  register_rmsnorm_op(registry);
  register_embedding_op(registry);
  register_lm_head_op(registry);
  register_logprob_op(registry);
  register_lm_head_logprob_op(registry);
  register_elementwise_ops(registry);
  register_add_rmsnorm_op(registry);
  register_rope_op(registry);
  register_attention_op(registry);
  register_chain_op(registry);

  registry.set_backend_status("cpu", true, "");
  register_matmul_cpu(registry);
  register_rmsnorm_cpu(registry);
  register_embedding_cpu(registry);
  register_lm_head_cpu(registry);
  register_logprob_cpu(registry);
  register_lm_head_logprob_cpu(registry);
  register_elementwise_cpu(registry);
  register_add_rmsnorm_cpu(registry);
  register_rope_cpu(registry);
  register_attention_cpu(registry);
}

void register_all(Registry& registry) {
  register_ops_and_cpu(registry);
  register_test_impls_cpu(registry);  // only with BITCHECK_TEST_IMPLS=1

  register_cuda_backend(registry);
  register_chain_impls(registry);  // composes the impls registered above
}

}  // namespace bitcheck
