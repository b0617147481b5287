// Host-side helpers shared by the CUDA adapters of the norm, elementwise and rope ops: dtype
// mapping, uploads and downloads of host tensors, the real-slot list a kernel iterates, and the
// rotated, warmed-up, median-of-repeats timing loop of benchmark(). Host compiler only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bitcheck/op.h"
#include "device_dtype.h"
#include "bench_support.h"
#include "runtime.h"

namespace bitcheck::cuda_support {

inline cuda::DeviceDType device_dtype(DType dtype) {
  switch (dtype) {
    case DType::bf16: return cuda::DeviceDType::bf16;
    case DType::fp16: return cuda::DeviceDType::fp16;
    default: return cuda::DeviceDType::fp32;
  }
}

inline cuda::DeviceBuffer upload(const Tensor& tensor) {
  cuda::DeviceBuffer buffer(std::max<std::size_t>(tensor.bytes(), 16));
  buffer.upload(tensor.data(), tensor.bytes());
  return buffer;
}

inline void download(const cuda::DeviceBuffer& buffer, Tensor& tensor) {
  buffer.download(tensor.data(), tensor.bytes());
}

// The real (non-pad) slots in slot order, uploaded as int32 for kernels that skip padding.
inline std::vector<std::int32_t> real_slot_list(const Batch& batch) {
  std::vector<std::int32_t> slots;
  for (std::int64_t s = 0; s < batch.slots(); ++s) {
    if (!batch.is_pad(s)) slots.push_back(static_cast<std::int32_t>(s));
  }
  return slots;
}

inline cuda::DeviceBuffer upload_ints(const std::vector<std::int32_t>& values) {
  cuda::DeviceBuffer buffer(std::max<std::size_t>(values.size() * sizeof(std::int32_t), 16));
  buffer.upload(values.data(), values.size() * sizeof(std::int32_t));
  return buffer;
}

// Parameters stay on the device across invocations and cases, keyed by the runner's input id.
class ParameterCache {
 public:
  const cuda::DeviceBuffer& get(const Batch& batch, const std::string& name) {
    std::string key = name + "#" + std::to_string(batch.input_ids.at(name));
    auto it = buffers_.find(key);
    if (it != buffers_.end()) return it->second;
    if (buffers_.size() >= 4) buffers_.clear();
    return buffers_.emplace(key, upload(batch.in(name))).first->second;
  }

 private:
  std::map<std::string, cuda::DeviceBuffer> buffers_;
};

using cuda_bench::rotation_sets;
using cuda_bench::time_rotated;

using cuda_bench::random_input;

}  // namespace bitcheck::cuda_support
