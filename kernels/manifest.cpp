// The manifest: every op, listed once here in a fixed order (the order of the status matrix and of
// "first failing op"). Each op's register_<op>() (kernels/<op>/) adds its parts; every op's
// definition and CPU impls come first, then the test impls' CPU part, the CUDA backend, the test
// impls' CUDA part and every op's CUDA impls, and last the impls composed of the others (the
// chain).
#include "manifest.h"

#include "add_rmsnorm/add_rmsnorm.h"
#include "all_reduce/all_reduce.h"
#include "attention/attention.h"
#include "chain/chain.h"
#include "common/cuda_backend.h"
#include "core/op.h"
#include "elementwise/elementwise.h"
#include "embedding/embedding.h"
#include "lm_head/lm_head.h"
#include "lm_head_logprob/lm_head_logprob.h"
#include "logprob/logprob.h"
#include "matmul/matmul.h"
#include "moe/moe.h"
#include "reduce_scatter/reduce_scatter.h"
#include "rmsnorm/rmsnorm.h"
#include "rope/rope.h"
#include "testing/testing.h"

namespace bitcheck {
namespace {

using RegisterOp = void (*)(Registry&, OpPart);

constexpr RegisterOp manifest[] = {
    register_matmul,           // kernels/matmul/
    register_rmsnorm,          // kernels/rmsnorm/
    register_embedding,        // kernels/embedding/
    register_lm_head,          // kernels/lm_head/
    register_logprob,          // kernels/logprob/
    register_lm_head_logprob,  // kernels/lm_head_logprob/
    register_elementwise,     // kernels/elementwise/: silu, gelu, swiglu, residual_add, scale, cast
    register_add_rmsnorm,     // kernels/add_rmsnorm/
    register_rope,            // kernels/rope/
    register_attention,       // kernels/attention/
    register_moe,             // kernels/moe/
    register_all_reduce,      // kernels/all_reduce/: collectives over the case's tp ranks
    register_reduce_scatter,  // kernels/reduce_scatter/
    register_chain,           // kernels/chain/, after the ops it composes
};

void register_part(Registry& registry, OpPart part) {
  for (RegisterOp register_op : manifest) register_op(registry, part);
}

}  // namespace

void register_ops_and_cpu(Registry& registry) {
  register_part(registry, OpPart::definition_and_cpu);
  registry.set_backend_status("cpu", true, "");
}

void register_all(Registry& registry) {
  register_ops_and_cpu(registry);
  register_testing(registry, OpPart::definition_and_cpu);  // only with BITCHECK_TEST_IMPLS=1

  register_cuda_backend(registry);
  register_testing(registry, OpPart::cuda);
  register_part(registry, OpPart::cuda);
  register_part(registry, OpPart::composed);  // composes the impls registered above
}

}  // namespace bitcheck
