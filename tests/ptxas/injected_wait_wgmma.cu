// The second control of scripts/check-ptxas.sh (ctest ptxas_wgmma_pipeline_control_read, expected
// to fail): an accumulator read between a wgmma's commit and its wait. ptxas then injects a wait of
// its own (info C7517) and serializes the pipeline (C7514), which a check for C7515 alone misses.
// Compiled only, never run.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/wgmma.cuh"

__global__ void injected_wait_control(float* out, std::uint64_t desc_a, std::uint64_t desc_b,
                                      int blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace wgmma = bitcheck::cuda::wgmma;
  float acc[32];
  float sum = 0.0f;
  for (int kb = 0; kb < blocks; ++kb) {
    wgmma::fence();
    for (int k = 0; k < 4; ++k) {
      wgmma::ss_m64n64k16<__nv_bfloat16>(acc, desc_a + k, desc_b + 64 * kb + k, k > 0);
    }
    wgmma::commit();
    sum += acc[threadIdx.x % 32];  // before the wait
    wgmma::wait<0>();
  }
  out[threadIdx.x] = sum;
#endif
}
