// Test-only impls that fail on purpose, to prove that a sweep survives them (fault isolation):
// registered only when the environment variable BITCHECK_TEST_IMPLS is 1, never in a normal
// listing or sweep. CPU: matmul/test-crash (SIGSEGV). CUDA (kernels/fault/): matmul/test-trap,
// matmul/test-illegal-address, matmul/test-oom.
#pragma once

namespace bitcheck {
class Registry;
bool test_impls_enabled();
void register_test_impls_cpu(Registry& registry);
}  // namespace bitcheck
