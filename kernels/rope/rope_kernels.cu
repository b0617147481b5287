// rope/* kernel: rotary position embedding, beside its launcher.
//
// One block per slot; thread i of the block handles rotary pair i for every head of the token.
// The angle of a (position, pair) is always fp32(position) * inv_freq[i] (one __fmul_rn), sin/cos
// come from sincosf (the accurate function; no --use_fast_math, never __sinf), and the rotation
// uses explicitly rounded operations (lib/ops/rope_math.h). There is no vector body and scalar
// tail here: every element takes the same single path, so nothing about the batch, the slot, the
// neighbours or the padding enters an element's arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../cuda_check.cuh"
#include "../../lib/ops/rope_math.h"
#include "rope_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float load(const void* base, DeviceDType dtype, int64_t index) {
  switch (dtype) {
    case DeviceDType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case DeviceDType::fp16: return __half2float(static_cast<const __half*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

__device__ __forceinline__ void store(void* base, DeviceDType dtype, int64_t index, float value) {
  switch (dtype) {
    case DeviceDType::bf16: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value); return;
    case DeviceDType::fp16: static_cast<__half*>(base)[index] = __float2half_rn(value); return;
    default: static_cast<float*>(base)[index] = value;
  }
}

__global__ void __launch_bounds__(kThreads) rope_kernel(RopeLaunch a) {
  const int64_t slot = blockIdx.x;
  const int32_t position = a.positions[slot];
  if (position < 0) return;  // pad slot
  const int64_t row = slot * a.heads * a.head_dim;
  const int64_t pairs = a.rotary_dim / 2;
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const float f = a.inverse_frequency[i];
    const float theta = a.chunk_relative ? rope::chunk_relative_angle(position, a.chunk_start, f)
                                         : rope::angle(position, f);
    float sine, cosine;
    sincosf(theta, &sine, &cosine);
    int64_t first = 0, second = 0;
    rope::pair_indices(a.style, a.rotary_dim, i, first, second);
    for (int64_t head = 0; head < a.heads; ++head) {
      const int64_t base = row + head * a.head_dim;
      float out_a, out_b;
      rope::rotate(a.backward, cosine, sine, load(a.in, a.dtype, base + first), load(a.in, a.dtype, base + second),
                   out_a, out_b);
      store(a.out, a.dtype, base + first, out_a);
      store(a.out, a.dtype, base + second, out_b);
    }
  }
  // Dimensions past the rotary part pass through unchanged.
  const int64_t rest = a.head_dim - a.rotary_dim;
  for (int64_t e = threadIdx.x; e < a.heads * rest; e += blockDim.x) {
    const int64_t index = row + (e / rest) * a.head_dim + a.rotary_dim + e % rest;
    store(a.out, a.dtype, index, load(a.in, a.dtype, index));
  }
}

}  // namespace

void rope_launch(const RopeLaunch& a, CUstream_st* stream) {
  if (a.slots == 0) return;
  rope_kernel<<<static_cast<unsigned>(a.slots), kThreads, 0, stream>>>(a);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
