// Host-side helpers shared by the CUDA adapters of the vocabulary ops (embedding, lm_head,
// logprob, lm_head_logprob): dtype mapping, uploads, real-slot lists, the device error record, a
// process-wide parameter cache (so a tied table is one device buffer for every op), and the
// benchmark timing loop. Header-only, host compiler, no CUDA headers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bitcheck/op.h"
#include "device_dtype.h"
#include "bench_support.h"
#include "runtime.h"

namespace bitcheck::vocab_device {

inline cuda::DeviceDType device_dtype(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return cuda::DeviceDType::bf16;
    case DType::fp16:
      return cuda::DeviceDType::fp16;
    case DType::fp32:
      return cuda::DeviceDType::fp32;
    default:
      throw std::invalid_argument("no device dtype for " + to_string(dtype));
  }
}

inline cuda::DeviceBuffer upload_bytes(const void* data, std::size_t bytes) {
  cuda::DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
  if (bytes) buffer.upload(data, bytes);
  return buffer;
}
inline cuda::DeviceBuffer upload(const Tensor& tensor) {
  return upload_bytes(tensor.data(), tensor.bytes());
}
template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& values) {
  return upload_bytes(values.data(), values.size() * sizeof(T));
}
inline void download(const cuda::DeviceBuffer& buffer, Tensor& tensor) {
  buffer.download(tensor.data(), tensor.bytes());
}

// Slots of the real rows, in slot order (the index lists the kernels take).
inline std::vector<std::int32_t> real_slots(const Batch& batch) {
  std::vector<std::int32_t> slots;
  for (std::int64_t s = 0; s < batch.slots(); ++s) {
    if (!batch.is_pad(s)) slots.push_back(static_cast<std::int32_t>(s));
  }
  return slots;
}

// Rows of `tensor` at `slots`, packed in that order.
inline Tensor compact_rows(const Tensor& tensor, const std::vector<std::int32_t>& slots) {
  std::vector<std::int64_t> shape = tensor.shape();
  shape[0] = static_cast<std::int64_t>(slots.size());
  Tensor packed(tensor.dtype(), shape);
  for (std::size_t i = 0; i < slots.size(); ++i)
    packed.copy_row_from(tensor, slots[i], static_cast<std::int64_t>(i));
  return packed;
}

// The device error record: all ones = no error; otherwise (slot << 32 | id) of a rejected id.
class ErrorRecord {
 public:
  ErrorRecord() : buffer_(sizeof(std::uint64_t)) { buffer_.fill_bytes(0xFF); }
  std::uint64_t* get() { return buffer_.as<std::uint64_t>(); }
  // Throws, naming the id and its slot, when a kernel recorded one.
  void check(const std::string& what, std::int64_t vocab) const {
    std::uint64_t record = 0;
    buffer_.download(&record, sizeof record);
    if (record == ~std::uint64_t(0)) return;
    const auto id = static_cast<std::int32_t>(static_cast<std::uint32_t>(record & 0xFFFFFFFFu));
    const auto slot = static_cast<std::int64_t>(record >> 32);
    throw std::out_of_range(what + ": token id " + std::to_string(id) + " at slot " +
                            std::to_string(slot) + " is out of range [0, " + std::to_string(vocab) +
                            ") (reported by the device)");
  }

 private:
  cuda::DeviceBuffer buffer_;
};

// Parameters stay on the device across invocations, cases and ops. An entry is keyed by the host
// tensor itself (the runner hands out immutable shared tensors) and holds a reference to it, so its
// address cannot be reused by another tensor while the entry lives: pointer identity is content
// identity. (Input ids alone are not enough: they are unique within one Runner only.) The runner
// gives the embedding and the LM head of one case set the very same table tensor, so the tied LM
// head reads the buffer the embedding gathers from. Entries are shared pointers: evicting one never
// frees a buffer a caller still uses.
inline std::shared_ptr<const cuda::DeviceBuffer> shared_parameter(
    const Batch& batch, const std::string& name,
    const std::function<Tensor(const Tensor&)>& transform = nullptr,
    const std::string& variant = "") {
  struct Entry {
    std::shared_ptr<const Tensor> host;
    std::string variant;
    std::shared_ptr<const cuda::DeviceBuffer> device;
  };
  static std::vector<Entry> cache;
  const std::shared_ptr<const Tensor>& host = batch.inputs.at(name);
  for (const Entry& entry : cache) {
    if (entry.host == host && entry.variant == variant) return entry.device;
  }
  if (cache.size() >= 4) cache.erase(cache.begin());
  auto device = std::make_shared<const cuda::DeviceBuffer>(transform ? upload(transform(*host))
                                                                     : upload(*host));
  cache.push_back({host, variant, device});
  return device;
}

// [rows, cols] -> [cols, rows], bits copied.
inline Tensor transposed(const Tensor& matrix) {
  const std::int64_t rows = matrix.shape()[0], cols = matrix.shape()[1];
  Tensor result(matrix.dtype(), {cols, rows});
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      result.set_bits(c * rows + r, matrix.bits(r * cols + c));
  }
  return result;
}

using cuda_bench::random_input;
using cuda_bench::rotation_sets;
using cuda_bench::time_rotated;

}  // namespace bitcheck::vocab_device
