// elementwise/*: launcher of the vectorized elementwise kernel (silu, gelu_tanh, gelu_erf, swiglu,
// residual_add, scale, cast; forward and backward). Plain C++ header, no CUDA headers.
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

// Every row tensor of the op is a flattened buffer of `count` elements (slots x width), each in
// its own dtype. The formula of each element is the one of kernels/common/elementwise_math.h for
// `op` (elementwise::Op) and pass; the body uses Variant::exact, the scalar tail `tail_variant`,
// and the body ends at elementwise::body_end(tail_variant, count) (a control's tail is longer).
struct ElementwiseLaunch {
  int op = 0;
  bool backward = false;
  int tail_variant = 0;  // elementwise::Variant; exact for the fixed-order impl
  int inputs = 0;
  int outputs = 0;
  const void* in[3] = {nullptr, nullptr, nullptr};
  DeviceDType in_dtype[3] = {DeviceDType::fp32, DeviceDType::fp32, DeviceDType::fp32};
  void* out[2] = {nullptr, nullptr};
  DeviceDType out_dtype[2] = {DeviceDType::fp32, DeviceDType::fp32};
  const float* parameter = nullptr;  // per-channel fp32 vector of `width` (scale), or nullptr
  int64_t count = 0;
  int64_t width = 1;
};

// Requires 16-byte aligned buffers (cudaMalloc gives 256); throws std::invalid_argument otherwise.
void elementwise_launch(const ElementwiseLaunch& launch, CUstream_st* stream);

}  // namespace bitcheck::cuda
