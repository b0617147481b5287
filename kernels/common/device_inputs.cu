// The counter-based input generator on the device (common/device_inputs.h). Kernels:
//   uniform_kernel   one thread per element: the key's hash, its uniform draw times the column's
//                    scale rounded to the dtype (round to nearest even, as the host rounds), or
//                    the special value the selection draw picks. The same inline arithmetic as
//                    the host's (core/counter_hash.h), so each element's bits are the host's.
#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/device_inputs.h"
#include "core/counter_hash.h"

namespace bitcheck::cuda {
namespace {

constexpr int threads = 256;

struct KernelKey {
  std::uint64_t seed, name_hash;
  double rate;
  counter::FloatFormat format;
};

template <typename T>
__device__ std::uint32_t storage_bits(T value);
template <>
__device__ std::uint32_t storage_bits<float>(float value) {
  return __float_as_uint(value);
}
template <>
__device__ std::uint32_t storage_bits<__nv_bfloat16>(__nv_bfloat16 value) {
  return __bfloat16_as_ushort(value);
}
template <>
__device__ std::uint32_t storage_bits<__half>(__half value) {
  return __half_as_ushort(value);
}

template <typename Bits>
__global__ void uniform_kernel(KernelKey key, const float* column_scale, std::int64_t first_row,
                               std::int64_t rows, std::int64_t width, Bits* out,
                               DeviceDType dtype) {
  const std::int64_t index = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (index >= rows * width) return;
  const std::int64_t row = first_row + index / width, column = index % width;
  const float value =
      __fmul_rn(counter::uniform_of(counter::key_hash(key.seed, key.name_hash, row, column)),
                column_scale[column]);
  std::uint32_t bits = 0;
  switch (dtype) {
    case DeviceDType::bf16:
      bits = storage_bits(from_float<__nv_bfloat16>(value));
      break;
    case DeviceDType::fp16:
      bits = storage_bits(from_float<__half>(value));
      break;
    case DeviceDType::fp32:
      bits = storage_bits(value);
      break;
  }
  const counter::SpecialDraw special =
      counter::special_at(key.format, key.seed, key.name_hash, row, column, key.rate);
  if (special.kind != counter::SpecialKind::none) bits = special.bits;
  out[index] = static_cast<Bits>(bits);
}

counter::FloatFormat format_of(DeviceDType dtype) {
  switch (dtype) {
    case DeviceDType::bf16:
      return {16, 8, 7};
    case DeviceDType::fp16:
      return {16, 5, 10};
    case DeviceDType::fp32:
      break;
  }
  return {32, 8, 23};
}

}  // namespace

void generate_uniform_on_device(const UniformInputKey& key, std::int64_t first_row,
                                std::int64_t rows, void* out, void* stream) {
  const auto width = static_cast<std::int64_t>(key.column_scale.size());
  if (rows <= 0 || width == 0) return;
  DeviceBuffer scales(key.column_scale.size() * sizeof(float));
  scales.upload(key.column_scale.data(), scales.bytes());
  const KernelKey kernel_key{key.seed, key.name_hash, key.special_value_rate, format_of(key.dtype)};
  const std::int64_t count = rows * width;
  const auto blocks = static_cast<unsigned>((count + threads - 1) / threads);
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  if (key.dtype == DeviceDType::fp32) {
    uniform_kernel<<<blocks, threads, 0, cuda_stream>>>(
        kernel_key, scales.as<float>(), first_row, rows, width, static_cast<std::uint32_t*>(out),
        key.dtype);
  } else {
    uniform_kernel<<<blocks, threads, 0, cuda_stream>>>(
        kernel_key, scales.as<float>(), first_row, rows, width, static_cast<std::uint16_t*>(out),
        key.dtype);
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
  BITCHECK_CUDA_CALL(cudaStreamSynchronize(cuda_stream));  // `scales` is freed on return
}

}  // namespace bitcheck::cuda
