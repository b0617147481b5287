// Kernels that fault on purpose, for the test-only impls of kernels/testing/testing_cuda.cpp. Each
// launcher synchronizes, so the fault surfaces as a CudaError from the launcher itself.
#pragma once

namespace bitcheck::cuda {
// A kernel that executes __trap(): a sticky error (the context is unusable afterwards).
void launch_trap_kernel();
// A kernel that stores through an address no allocation covers: a sticky illegal-address error.
void launch_illegal_address_kernel();
}  // namespace bitcheck::cuda
