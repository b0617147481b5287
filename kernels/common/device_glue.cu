// Column copies and conversions on the device with the host's bits (common/device_glue.h).
// Kernel: convert_kernel, one element per thread in a grid-stride loop; the conversions are the
// integer forms of lib/core/dtype.cpp's (no CUDA intrinsic: theirs give NaN another payload).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "common/cuda_check.cuh"
#include "common/device_glue.h"

namespace bitcheck::cuda {
namespace {

__device__ std::uint16_t bf16_of(std::uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

__device__ std::uint16_t fp16_of(std::uint32_t bits) {
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x01ffu));
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    if (magnitude < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  std::uint32_t rebased = magnitude - 0x38000000u;
  const std::uint32_t lsb = (rebased >> 13) & 1u;
  rebased += 0x0fffu + lsb;
  return static_cast<std::uint16_t>(sign | (rebased >> 13));
}

__device__ std::uint32_t fp32_of_fp16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return sign | 0x7f800000u | (mantissa << 13);
  if (exponent == 0) {
    // mantissa * 2^-24, exact in fp32 (a subnormal fp16 is a normal fp32 or zero).
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign | __float_as_uint(magnitude);
  }
  return sign | ((exponent + 112u) << 23) | (mantissa << 13);
}

__global__ void convert_kernel(const void* in, int from, void* out, int to, std::size_t count) {
  const int fp32 = static_cast<int>(DeviceDType::fp32), bf16 = static_cast<int>(DeviceDType::bf16);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (from == fp32) {
      const std::uint32_t bits = static_cast<const std::uint32_t*>(in)[i];
      static_cast<std::uint16_t*>(out)[i] = to == bf16 ? bf16_of(bits) : fp16_of(bits);
    } else {
      const std::uint16_t bits = static_cast<const std::uint16_t*>(in)[i];
      static_cast<std::uint32_t*>(out)[i] =
          from == bf16 ? static_cast<std::uint32_t>(bits) << 16 : fp32_of_fp16(bits);
    }
  }
}

std::size_t element_bytes(DeviceDType dtype) {
  return dtype == DeviceDType::fp32 ? 4 : 2;
}

}  // namespace

void copy_columns_on_device(void* destination, std::size_t pitch, const void* source,
                            std::size_t source_pitch, std::size_t width, std::size_t rows) {
  if (rows == 0 || width == 0) return;
  BITCHECK_CUDA_CALL(cudaMemcpy2DAsync(destination, pitch, source, source_pitch, width, rows,
                                       cudaMemcpyDeviceToDevice));
}

void convert_on_device(const void* in, DeviceDType from, void* out, DeviceDType to,
                       std::size_t count) {
  if (count == 0) return;
  if (from == to) {
    BITCHECK_CUDA_CALL(
        cudaMemcpyAsync(out, in, count * element_bytes(from), cudaMemcpyDeviceToDevice));
    return;
  }
  if ((from == DeviceDType::fp32) == (to == DeviceDType::fp32))
    throw std::invalid_argument("convert_on_device: only fp32 <-> bf16 / fp16");
  constexpr int threads = 256;
  const std::size_t wanted = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  convert_kernel<<<blocks, threads>>>(in, static_cast<int>(from), out, static_cast<int>(to), count);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
