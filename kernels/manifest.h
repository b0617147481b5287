// The manifest (kernels/manifest.cpp): what registers every op, its impls and the backends, in the
// order of the status matrix. The CLI and the tests call it; lib/ never does.
#pragma once

namespace bitcheck {

class Registry;

// Every op and its CPU impls, without test impls, the CUDA backend or the chain's impls (which
// compose whatever is registered before them: a test can add its own impls first).
void register_ops_and_cpu(Registry& registry);
// register_ops_and_cpu, the test impls (BITCHECK_TEST_IMPLS=1), the CUDA backend (when built) and
// the chain's impls.
void register_all(Registry& registry);

}  // namespace bitcheck
