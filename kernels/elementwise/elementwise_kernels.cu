// elementwise/* kernels: one vectorized kernel for the elementwise family, beside its launcher.
//
// Each thread owns groups of 8 consecutive elements of the flattened buffers (16-byte loads of
// bf16/fp16, two 16-byte loads of fp32), counted from the buffer start; the elements past the
// vector body (elementwise::body_end: the last count % 8 for the fixed-order impl, the partial last
// 2048-element tile for a control) form the scalar tail, done by the last block. Which logical
// element falls in the tail therefore
// depends on the batch (slot and row count). The fixed-order impl makes that harmless: body and tail
// call the same formula (lib/ops/elementwise_math.h) with the same Variant::exact, whose every
// operation is an explicitly rounded fp32 operation (__fmul_rn & co., no FMA contraction, no fast
// math), so an element's bits depend only on its inputs. A control passes another tail variant.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "../cuda_check.cuh"
#include "../vector_io.cuh"
#include "../../lib/ops/elementwise_math.h"
#include "elementwise_kernels.h"

namespace bitcheck::cuda {
namespace {

using elementwise::Op;
using elementwise::Variant;
constexpr int kThreads = 256;
constexpr int kGroup = vector_group;

__device__ __forceinline__ float load_one(const void* base, DeviceDType dtype, int64_t index) {
  switch (dtype) {
    case DeviceDType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case DeviceDType::fp16: return __half2float(static_cast<const __half*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

__device__ __forceinline__ void store_one(void* base, DeviceDType dtype, int64_t index, float value, bool toward_zero) {
  switch (dtype) {
    case DeviceDType::bf16:
      static_cast<__nv_bfloat16*>(base)[index] = toward_zero ? __float2bfloat16_rz(value) : __float2bfloat16_rn(value);
      return;
    case DeviceDType::fp16:
      static_cast<__half*>(base)[index] = toward_zero ? __float2half_rz(value) : __float2half_rn(value);
      return;
    default: static_cast<float*>(base)[index] = value;
  }
}

template <Op kOp, bool kBackward>
__device__ __forceinline__ void apply(Variant variant, const float* in, float parameter, float* out) {
  if (kBackward) {
    elementwise::backward(kOp, variant, in, parameter, out);
  } else {
    elementwise::forward(kOp, variant, in, parameter, out);
  }
}

template <Op kOp, bool kBackward>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(ElementwiseLaunch a) {
  const Variant tail = static_cast<Variant>(a.tail_variant);
  const int64_t body = elementwise::body_end(tail, a.count);
  const int64_t groups = body / kGroup;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float in[3][kGroup], out[2][kGroup];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      if (k < a.inputs) load_group8(a.in[k], a.in_dtype[k], g, in[k]);
    }
    int64_t column = a.parameter ? (g * kGroup) % a.width : 0;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float element_in[3] = {in[0][j], in[1][j], in[2][j]};
      float element_out[2] = {0.f, 0.f};
      float parameter = 0.f;
      if (a.parameter) {
        parameter = a.parameter[column];
        column = column + 1 == a.width ? 0 : column + 1;
      }
      apply<kOp, kBackward>(Variant::exact, element_in, parameter, element_out);
      out[0][j] = element_out[0];
      out[1][j] = element_out[1];
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k < a.outputs) store_group8(a.out[k], a.out_dtype[k], g, out[k]);
    }
  }
  if (blockIdx.x != gridDim.x - 1) return;
  // Scalar tail: the elements past the vector body.
  for (int64_t e = body + threadIdx.x; e < a.count; e += blockDim.x) {
    float element_in[3] = {0.f, 0.f, 0.f}, element_out[2] = {0.f, 0.f};
    for (int k = 0; k < a.inputs; ++k) element_in[k] = load_one(a.in[k], a.in_dtype[k], e);
    const float parameter = a.parameter ? a.parameter[e % a.width] : 0.f;
    apply<kOp, kBackward>(tail, element_in, parameter, element_out);
    for (int k = 0; k < a.outputs; ++k) {
      store_one(a.out[k], a.out_dtype[k], e, element_out[k], tail == Variant::round_toward_zero);
    }
  }
}

template <Op kOp>
void launch_op(const ElementwiseLaunch& a, int blocks, cudaStream_t stream) {
  if (a.backward) {
    elementwise_kernel<kOp, true><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    elementwise_kernel<kOp, false><<<blocks, kThreads, 0, stream>>>(a);
  }
}

}  // namespace

void elementwise_launch(const ElementwiseLaunch& a, CUstream_st* stream) {
  if (a.count <= 0) return;
  for (int k = 0; k < 3; ++k) {
    if (!aligned_16(a.in[k]) || (k < 2 && !aligned_16(a.out[k]))) {
      throw std::invalid_argument("elementwise_launch: row buffers must be 16-byte aligned (vector body)");
    }
  }
  // Enough blocks to cover every group once at small sizes; a grid-stride loop beyond that. The
  // grid shape changes which thread handles a group, never an element's arithmetic.
  const int64_t groups = a.count / kGroup;
  const int blocks = static_cast<int>(std::clamp<int64_t>((groups + kThreads - 1) / kThreads, 1, 132 * 16));
  switch (static_cast<Op>(a.op)) {
    case Op::silu: launch_op<Op::silu>(a, blocks, stream); break;
    case Op::gelu_tanh: launch_op<Op::gelu_tanh>(a, blocks, stream); break;
    case Op::gelu_erf: launch_op<Op::gelu_erf>(a, blocks, stream); break;
    case Op::swiglu: launch_op<Op::swiglu>(a, blocks, stream); break;
    case Op::residual_add: launch_op<Op::residual_add>(a, blocks, stream); break;
    case Op::scale: launch_op<Op::scale>(a, blocks, stream); break;
    case Op::cast: launch_op<Op::cast>(a, blocks, stream); break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
