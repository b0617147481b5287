// Vector loads and stores of 8 consecutive elements of a bf16, fp16 or fp32 buffer (one 16-byte
// access for 16-bit dtypes, two for fp32), converted to and from fp32, for the memory-bound
// kernels, and their scalar forms (one element, the dtype a launch argument). Conversions are exact
// (widening) and round-to-nearest-even (narrowing): the same bits as the scalar __float2bfloat16_rn
// / __float2half_rn path, so a vector body and a scalar tail agree. Callers guarantee 16-byte
// alignment (group * 8 elements from a 16-byte aligned base).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device_dtype.h"

namespace bitcheck::cuda {

constexpr int vector_group = 8;

// The 8 bf16 or fp16 elements of one 16-byte word, widened to fp32.
__device__ __forceinline__ void widen_group8(const uint4 raw, DeviceDType dtype, float* values) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (dtype == DeviceDType::bf16) {
      values[2 * i] = __uint_as_float(words[i] << 16);
      values[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    } else {
      const __half2 pair = *reinterpret_cast<const __half2*>(&words[i]);
      const float2 f = __half22float2(pair);
      values[2 * i] = f.x;
      values[2 * i + 1] = f.y;
    }
  }
}

// Elements group * 8 .. group * 8 + 7 of `base`.
__device__ __forceinline__ void load_group8(const void* base, DeviceDType dtype, int64_t group,
                                            float* values) {
  if (dtype == DeviceDType::fp32) {
    const float4* p = static_cast<const float4*>(base) + group * 2;
    const float4 a = p[0], b = p[1];
    values[0] = a.x, values[1] = a.y, values[2] = a.z, values[3] = a.w;
    values[4] = b.x, values[5] = b.y, values[6] = b.z, values[7] = b.w;
    return;
  }
  const uint4 raw = static_cast<const uint4*>(base)[group];
  widen_group8(raw, dtype, values);
}

// 8 fp32 values rounded (to nearest even) to bf16 or fp16 and packed into one 16-byte word, element
// 2i in the low half of word i: the inverse of widen_group8.
__device__ __forceinline__ uint4 narrow_group8(const float* values, DeviceDType dtype) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (dtype == DeviceDType::bf16) {
      __nv_bfloat162 pair = __floats2bfloat162_rn(values[2 * i], values[2 * i + 1]);
      words[i] = *reinterpret_cast<uint32_t*>(&pair);
    } else {
      __half2 pair = __floats2half2_rn(values[2 * i], values[2 * i + 1]);
      words[i] = *reinterpret_cast<uint32_t*>(&pair);
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ __forceinline__ void store_group8(void* base, DeviceDType dtype, int64_t group,
                                             const float* values) {
  if (dtype == DeviceDType::fp32) {
    float4* p = static_cast<float4*>(base) + group * 2;
    p[0] = make_float4(values[0], values[1], values[2], values[3]);
    p[1] = make_float4(values[4], values[5], values[6], values[7]);
    return;
  }
  static_cast<uint4*>(base)[group] = narrow_group8(values, dtype);
}

// Element `index` of `base`, widened to fp32.
__device__ __forceinline__ float load_element(const void* base, DeviceDType dtype, int64_t index) {
  switch (dtype) {
    case DeviceDType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case DeviceDType::fp16:
      return __half2float(static_cast<const __half*>(base)[index]);
    default:
      return static_cast<const float*>(base)[index];
  }
}

// Stores `value` rounded to nearest even into element `index` of `base`.
__device__ __forceinline__ void store_element(void* base, DeviceDType dtype, int64_t index,
                                              float value) {
  switch (dtype) {
    case DeviceDType::bf16:
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value);
      return;
    case DeviceDType::fp16:
      static_cast<__half*>(base)[index] = __float2half_rn(value);
      return;
    default:
      static_cast<float*>(base)[index] = value;
  }
}

// `value` rounded to nearest even in the dtype and widened back, as if stored and loaded.
__device__ __forceinline__ float round_to_dtype(DeviceDType dtype, float value) {
  switch (dtype) {
    case DeviceDType::bf16:
      return __bfloat162float(__float2bfloat16_rn(value));
    case DeviceDType::fp16:
      return __half2float(__float2half_rn(value));
    default:
      return value;
  }
}

// Host side: whether a device pointer allows the 16-byte group accesses above (null counts as
// aligned: an absent optional tensor).
inline bool aligned_16(const void* pointer) {
  return (reinterpret_cast<std::uintptr_t>(pointer) & 15u) == 0;
}

}  // namespace bitcheck::cuda
