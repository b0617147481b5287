// Test-only impls that fail on purpose, to prove that a sweep survives them (fault isolation):
// registered only when the environment variable BITCHECK_TEST_IMPLS is 1, never in a normal
// listing or sweep. CPU (testing_cpu.cpp): matmul/test-crash (SIGSEGV). CUDA (testing_cuda.cpp,
// fault_kernels.cu): matmul/test-trap, matmul/test-illegal-address, matmul/test-oom.
#pragma once
#include "common/registration.h"

namespace bitcheck {
bool test_impls_enabled();
// The manifest registers the CPU part after every op's CPU impls and the CUDA part before every
// op's CUDA impls, so a sweep meets the CUDA faults before the normal CUDA cases.
void register_testing(Registry& registry, OpPart part);
void register_test_impls_cpu(Registry& registry);
void register_test_impls_cuda(Registry& registry);
void register_test_ranks(Registry& registry);  // testing_ranks.cpp: BITCHECK_TEST_RANKS=1 too
}  // namespace bitcheck
