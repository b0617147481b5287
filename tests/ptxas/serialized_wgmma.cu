// The control of scripts/check-ptxas.sh (ctest ptxas_wgmma_pipeline_control, expected to fail): a
// branch around the wgmmas inside the K loop, the shape that made ptxas serialize every kernel of
// the fixed-order GEMM (info C7515). Compiled only, never run.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/wgmma.cuh"

__global__ void serialized_wgmma_control(float* out, std::uint64_t desc_a, std::uint64_t desc_b,
                                         int blocks, int skip) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace wgmma = bitcheck::cuda::wgmma;
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  for (int kb = 0; kb < blocks; ++kb) {
    if (skip == 0) {
      wgmma::fence();
      wgmma::ss_m64n64k16<__nv_bfloat16>(acc, desc_a + kb, desc_b + kb, 1);
      wgmma::commit();
      wgmma::wait<1>();
    }
  }
  wgmma::wait<0>();
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = acc[i];
#endif
}
