// elementwise/* kernels: one vectorized kernel for the elementwise family, beside its launcher.
//
// Each thread owns groups of 8 consecutive elements of the flattened buffers (16-byte loads of
// bf16/fp16, two 16-byte loads of fp32), counted from the buffer start; the elements past the
// vector body (elementwise::body_end: the last count % 8 for the fixed-order impl, the partial last
// 2048-element tile for a control) form the scalar tail, done by the last block. Which logical
// element falls in the tail therefore
// depends on the batch (slot and row count). The fixed-order impl makes that harmless: body and
// tail call the same formula (kernels/common/elementwise_math.h) with the same Variant::exact,
// whose every operation is an explicitly rounded fp32 operation (__fmul_rn & co., no FMA
// contraction, no fast math), so an element's bits depend only on its inputs. A control passes
// another tail variant.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"
#include "common/elementwise_math.h"
#include "common/vector_io.cuh"
#include "core/paths.h"
#include "elementwise_kernels.h"

namespace bitcheck::cuda {
namespace {

using elementwise::Op;
using elementwise::Variant;
constexpr int kThreads = 256;
constexpr int kGroup = vector_group;

__device__ __forceinline__ void store_one(void* base, DeviceDType dtype, int64_t index, float value,
                                          bool toward_zero) {
  switch (dtype) {
    case DeviceDType::bf16:
      static_cast<__nv_bfloat16*>(base)[index] =
          toward_zero ? __float2bfloat16_rz(value) : __float2bfloat16_rn(value);
      return;
    case DeviceDType::fp16:
      static_cast<__half*>(base)[index] =
          toward_zero ? __float2half_rz(value) : __float2half_rn(value);
      return;
    default:
      static_cast<float*>(base)[index] = value;
  }
}

template <Op kOp, bool kBackward>
__device__ __forceinline__ void apply(Variant variant, const float* in, float parameter,
                                      float* out) {
  if (kBackward) {
    elementwise::backward(kOp, variant, in, parameter, out);
  } else {
    elementwise::forward(kOp, variant, in, parameter, out);
  }
}

// Inputs and outputs of `op` in a pass (kernels/common/elementwise_math.h lists them).
constexpr int op_inputs(Op op, bool backward) {
  switch (op) {
    case Op::swiglu:
      return backward ? 3 : 2;
    case Op::residual_add:
      return backward ? 1 : 2;
    case Op::cast:
      return 2;
    default:
      return backward ? 2 : 1;
  }
}
constexpr int op_outputs(Op op, bool backward) {
  return op == Op::cast || (backward && (op == Op::swiglu || op == Op::residual_add)) ? 2 : 1;
}

// The raw bytes of one group of one tensor: 16 bytes of bf16/fp16, 32 of fp32. kNarrow: every
// tensor of the launch is 16-bit, so the second half is never needed (and takes no registers).
template <bool kNarrow>
struct RawGroup {
  uint4 lo, hi;
};
template <>
struct RawGroup<true> {
  uint4 lo;
};

template <bool kNarrow>
__device__ __forceinline__ RawGroup<kNarrow> load_raw(const void* base, DeviceDType dtype,
                                                      int64_t group) {
  RawGroup<kNarrow> raw;
  if constexpr (kNarrow) {
    raw.lo = static_cast<const uint4*>(base)[group];
    return raw;
  } else if (dtype == DeviceDType::fp32) {
    const uint4* p = static_cast<const uint4*>(base) + group * 2;
    raw.lo = p[0];
    raw.hi = p[1];
  } else {
    raw.lo = static_cast<const uint4*>(base)[group];
    raw.hi = make_uint4(0, 0, 0, 0);
  }
  return raw;
}

template <bool kNarrow>
__device__ __forceinline__ void widen(const RawGroup<kNarrow>& raw, DeviceDType dtype,
                                      float* values) {
  if constexpr (!kNarrow) {
    if (dtype == DeviceDType::fp32) {
      const uint32_t words[8] = {raw.lo.x, raw.lo.y, raw.lo.z, raw.lo.w,
                                 raw.hi.x, raw.hi.y, raw.hi.z, raw.hi.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) values[i] = __uint_as_float(words[i]);
      return;
    }
  }
  widen_group8(raw.lo, dtype, values);
}

// Groups per thread and step: their loads are all issued before any is used, so each thread keeps
// 32-64 bytes per input in flight (one group of every input alone left the copy bandwidth unmet).
constexpr int step_groups(int inputs) {
  return inputs == 1 ? 4 : 2;
}

template <Op kOp, bool kBackward, bool kNarrow>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(ElementwiseLaunch a) {
  constexpr int kInputs = op_inputs(kOp, kBackward);
  constexpr int kOutputs = op_outputs(kOp, kBackward);
  constexpr int kStep = step_groups(kInputs);
  const Variant tail = static_cast<Variant>(a.tail_variant);
  const int64_t body = elementwise::body_end(tail, a.count);
  const int64_t groups = body / kGroup;
  // Step s of block b covers groups (b * kStep + u) * blockDim + thread for u < kStep: coalesced
  // for every u. Which thread and step take a group never changes its arithmetic.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kStep;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kStep + threadIdx.x;
       first < groups; first += stride) {
    RawGroup<kNarrow> raw[kStep][kInputs];
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int64_t g = first + static_cast<int64_t>(u) * blockDim.x;
#pragma unroll
      for (int k = 0; k < kInputs; ++k) {
        if (g < groups) raw[u][k] = load_raw<kNarrow>(a.in[k], a.in_dtype[k], g);
      }
    }
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int64_t g = first + static_cast<int64_t>(u) * blockDim.x;
      if (g >= groups) break;
      float in[3][kGroup] = {}, out[2][kGroup];
#pragma unroll
      for (int k = 0; k < kInputs; ++k) widen(raw[u][k], a.in_dtype[k], in[k]);
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
      for (int k = 0; k < kOutputs; ++k) store_group8(a.out[k], a.out_dtype[k], g, out[k]);
    }
  }
  if (blockIdx.x != gridDim.x - 1) return;
  // Scalar tail: the elements past the vector body.
  // Loops over compile-time counts only: a tensor index known at run time made every thread copy
  // the whole launch struct to local memory first.
  for (int64_t e = body + threadIdx.x; e < a.count; e += blockDim.x) {
    float element_in[3] = {0.f, 0.f, 0.f}, element_out[2] = {0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kInputs; ++k) element_in[k] = load_element(a.in[k], a.in_dtype[k], e);
    const float parameter = a.parameter ? a.parameter[e % a.width] : 0.f;
    apply<kOp, kBackward>(tail, element_in, parameter, element_out);
#pragma unroll
    for (int k = 0; k < kOutputs; ++k) {
      store_one(a.out[k], a.out_dtype[k], e, element_out[k], tail == Variant::round_toward_zero);
    }
  }
}

// Enough blocks to cover every group once, at most as many as are resident at once (then a
// grid-stride loop): every block stays until the end, so the work ends within one step of even (a
// fixed number of long-lived blocks above the resident count left up to a fifth of a wave idle at
// the end). The grid changes which thread handles a group, never an element's arithmetic.
template <Op kOp, bool kBackward, bool kNarrow>
void launch_kernel(const ElementwiseLaunch& a, cudaStream_t stream) {
  const auto kernel = elementwise_kernel<kOp, kBackward, kNarrow>;
  // Resident blocks per device, queried once per kernel and device.
  static std::atomic<int64_t> resident_on[16] = {};
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  int64_t resident = device >= 0 && device < 16 ? resident_on[device].load() : 0;
  if (resident == 0) {
    int sm_count = 0, per_sm = 0;
    BITCHECK_CUDA_CALL(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    BITCHECK_CUDA_CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    resident = static_cast<int64_t>(sm_count) * (per_sm > 0 ? per_sm : 1);
    if (device >= 0 && device < 16) resident_on[device] = resident;
  }
  const int64_t groups = a.count / kGroup;
  const int64_t per_block = static_cast<int64_t>(kThreads) * step_groups(op_inputs(kOp, kBackward));
  const int blocks =
      static_cast<int>(std::clamp<int64_t>((groups + per_block - 1) / per_block, 1, resident));
  kernel<<<blocks, kThreads, 0, stream>>>(a);
}

template <Op kOp, bool kNarrow>
void launch_op(const ElementwiseLaunch& a, cudaStream_t stream) {
  if (a.backward) {
    launch_kernel<kOp, true, kNarrow>(a, stream);
  } else {
    launch_kernel<kOp, false, kNarrow>(a, stream);
  }
}

template <Op kOp>
void launch_op(const ElementwiseLaunch& a, cudaStream_t stream) {
  bool narrow = true;
  for (int k = 0; k < a.inputs; ++k) narrow = narrow && a.in_dtype[k] != DeviceDType::fp32;
  if (narrow) {
    launch_op<kOp, true>(a, stream);
  } else {
    launch_op<kOp, false>(a, stream);
  }
}

}  // namespace

void elementwise_launch(const ElementwiseLaunch& a, CUstream_st* stream) {
  if (a.count <= 0) return;
  const Op op = static_cast<Op>(a.op);
  if (a.inputs != op_inputs(op, a.backward) || a.outputs != op_outputs(op, a.backward)) {
    throw std::invalid_argument("elementwise_launch: op " + std::to_string(a.op) +
                                (a.backward ? " backward" : " forward") + " takes " +
                                std::to_string(op_inputs(op, a.backward)) + " row inputs and " +
                                std::to_string(op_outputs(op, a.backward)) + " row outputs, got " +
                                std::to_string(a.inputs) + " and " + std::to_string(a.outputs));
  }
  for (int k = 0; k < 3; ++k) {
    if (!aligned_16(a.in[k]) || (k < 2 && !aligned_16(a.out[k]))) {
      throw std::invalid_argument(
          "elementwise_launch: row buffers must be 16-byte aligned (vector body)");
    }
  }
  // One kernel: the vector body over whole groups, the scalar tail over the rest (body_end).
  const int64_t body =
      elementwise::body_end(static_cast<elementwise::Variant>(a.tail_variant), a.count);
  if (body > 0) record_path("body.vector");
  if (body < a.count) record_path("tail.scalar");
  switch (op) {
    case Op::silu:
      launch_op<Op::silu>(a, stream);
      break;
    case Op::gelu_tanh:
      launch_op<Op::gelu_tanh>(a, stream);
      break;
    case Op::gelu_erf:
      launch_op<Op::gelu_erf>(a, stream);
      break;
    case Op::swiglu:
      launch_op<Op::swiglu>(a, stream);
      break;
    case Op::residual_add:
      launch_op<Op::residual_add>(a, stream);
      break;
    case Op::scale:
      launch_op<Op::scale>(a, stream);
      break;
    case Op::cast:
      launch_op<Op::cast>(a, stream);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
