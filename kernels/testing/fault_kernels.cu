// Kernels that fault on purpose (test only): __trap() and a store through an unmapped address.
#include <cstdint>

#include "common/cuda_check.cuh"
#include "fault_kernels.h"

namespace bitcheck::cuda {
namespace {

__global__ void trap_kernel() {
  __trap();
}

// The target comes from the host as a kernel argument, so the compiler cannot see the store is
// invalid and must emit it.
__global__ void illegal_store_kernel(float* target) {
  target[threadIdx.x] = 1.0f;
}

}  // namespace

void launch_trap_kernel() {
  trap_kernel<<<1, 32>>>();
  BITCHECK_CUDA_LAUNCH_CHECK();
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
}

void launch_illegal_address_kernel() {
  // The lowest page of the address space is never mapped on the device.
  illegal_store_kernel<<<1, 32>>>(reinterpret_cast<float*>(std::uintptr_t{0x100}));
  BITCHECK_CUDA_LAUNCH_CHECK();
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
}

}  // namespace bitcheck::cuda
