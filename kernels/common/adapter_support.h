// Host-side helpers shared by the CUDA adapters of every op: dtype mapping, uploads and downloads
// of host tensors, the real-slot list a kernel iterates, row compaction and transposition, the
// per-process parameter cache, and the rotated, warmed-up, median-of-repeats timing loop of
// benchmark(). Host compiler only.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "common/device_output_cuda.h"
#include "core/host_threads.h"
#include "core/op.h"
#include "device_dtype.h"
#include "runtime.h"

namespace bitcheck::cuda_support {

// The kernels' element type of a case dtype. A dtype no kernel takes (i32) is an error, never run
// as another dtype: an impl skips such a case (skip_reason) before it gets here.
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

// Uploads into a new device buffer of at least 16 bytes (never a zero-byte allocation).
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

// Several outputs brought back behind one wait for the GPU (cuda::copy_to_host_all).
inline void download_all(
    std::initializer_list<std::pair<const cuda::DeviceBuffer*, Tensor*>> outputs) {
  std::vector<cuda::HostCopy> copies;
  for (const auto& [buffer, tensor] : outputs) {
    if (tensor->bytes() > buffer->bytes())
      throw std::invalid_argument("download_all: more bytes than allocated");
    copies.push_back({tensor->data(), buffer->get(), tensor->bytes()});
  }
  cuda::copy_to_host_all(copies);
}

// Whether every byte of `tensor` is zero (in parts on threads when large; stops at a nonzero).
inline bool all_bytes_zero(const Tensor& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.data());
  std::atomic<bool> zero{true};
  run_in_parts(tensor.bytes(), 4096, std::size_t(32) << 20,
               [&](std::size_t first, std::size_t last) {
                 constexpr std::size_t block = 4096;
                 static const unsigned char zeros[block] = {};
                 for (std::size_t at = first; at < last && zero.load(std::memory_order_relaxed);
                      at += block) {
                   const std::size_t count = std::min(block, last - at);
                   if (std::memcmp(bytes + at, zeros, count) != 0)
                     zero.store(false, std::memory_order_relaxed);
                 }
               });
  return zero.load();
}

// A reduction output's accumulator on the device for a whole layout execution: every micro-batch
// adds into it and it comes back once, after the layout's last invocation (download_after_last;
// or it stays there for the runner's comparisons),
// instead of a round trip per invocation (a vocab-sized dtable is 0.5 GB each way). Made from the
// runner's initial tensor at the first invocation (zeros: set on the device instead of uploaded;
// any other start is uploaded) and kept in batch.layout_state, so only for impls that keep no
// other state there.
struct CarriedAccumulator {
  cuda::DeviceBuffer buffer;
};

inline cuda::DeviceBuffer& carried_accumulator(Batch& batch, const std::string& name) {
  auto state = std::static_pointer_cast<CarriedAccumulator>(batch.layout_state);
  if (!state) {
    state = std::make_shared<CarriedAccumulator>();
    const Tensor& initial = batch.out(name);
    if (all_bytes_zero(initial)) {
      state->buffer = cuda::DeviceBuffer(std::max<std::size_t>(initial.bytes(), 16));
      state->buffer.fill_bytes(0);
    } else {
      state->buffer = upload(initial);
    }
    batch.layout_state = state;
  }
  return state->buffer;
}

// After the last invocation the accumulator comes back, or stays on the device for the runner to
// compare there (Batch::reductions_stay_on_device, common/device_output_cuda.h): moved out of the
// state, which the runner drops after the last invocation anyway.
inline void download_after_last(Batch& batch, const std::string& name,
                                cuda::DeviceBuffer& accumulator) {
  if (batch.invocation_index + 1 >= batch.invocation_count)
    hand_over_reduction(batch, name, accumulator);
}

// The real (non-pad) slots in slot order, as int32 for the kernels that skip padding.
inline std::vector<std::int32_t> real_slot_list(const Batch& batch) {
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
  Tensor packed(tensor.dtype(), shape, Tensor::uninitialized);  // every row copied below
  for (std::size_t i = 0; i < slots.size(); ++i)
    packed.copy_row_from(tensor, slots[i], static_cast<std::int64_t>(i));
  return packed;
}

// [rows, cols] -> [cols, rows], bits copied (in 64 x 64 blocks of the raw elements).
inline Tensor transposed(const Tensor& matrix) {
  const std::int64_t rows = matrix.shape()[0], cols = matrix.shape()[1];
  Tensor result(matrix.dtype(), {cols, rows}, Tensor::uninitialized);  // every element written
  auto transpose = [&](auto element) {
    using E = decltype(element);
    const E* in = static_cast<const E*>(matrix.data());
    E* out = static_cast<E*>(result.data());
    constexpr std::int64_t block = 64;
    for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
      const std::int64_t r1 = std::min(rows, r0 + block);
      for (std::int64_t c0 = 0; c0 < cols; c0 += block) {
        const std::int64_t c1 = std::min(cols, c0 + block);
        for (std::int64_t r = r0; r < r1; ++r)
          for (std::int64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
      }
    }
  };
  if (dtype_size(matrix.dtype()) == 2) {
    transpose(std::uint16_t{});
  } else {
    transpose(std::uint32_t{});
  }
  return result;
}

// The device memory one process's cache of parameters may hold: a quarter of the GPU's memory
// shared by the processes on it (BITCHECK_SHARDS_ON_DEVICE, set by `sweep --devices`), at most
// 4 GiB. Sixteen nightly shards on an 80 GB H100: about 1.24 GiB each.
inline std::size_t parameter_budget_bytes() {
  static const std::size_t budget = [] {
    const std::size_t sharing = shards_on_device();
    const std::size_t most = std::size_t(4) << 30;
    const cuda::DeviceInfo info = cuda::query_device();
    if (!info.available || info.total_memory_bytes == 0) return most;
    return std::min(most, info.total_memory_bytes / (4 * sharing));
  }();
  return budget;
}

// Parameters stay on the device across invocations, cases and impls, in one cache per process
// (ParameterCache::process()), keyed by the runner's input id (process-unique) and whether the
// copy is transposed: up to 8 of them (twice Batch::parameters_in_use when a chain says it cycles
// through more) within parameter_budget_bytes(), the least recently used given back first (8: a
// chain layer's four GEMM weights and their transposed copies). The impls of one op share the
// device copy of a weight. The buffer returned last is never given back by the next call (its
// caller may still hold it).
class ParameterCache {
 public:
  static constexpr std::size_t most_entries = 8;

  static ParameterCache& process() {
    static ParameterCache cache;
    return cache;
  }

  const cuda::DeviceBuffer& get(const Batch& batch, const std::string& name,
                                bool transposed_copy = false) {
    const std::string key =
        name + (transposed_copy ? "^T#" : "#") + std::to_string(batch.input_ids.at(name));
    ++clock_;
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      it->second.used = clock_;
      return it->second.buffer;
    }
    const Tensor& host = batch.in(name);
    // A chain's layers cycle through more weights than the default few; each may have a
    // transposed copy.
    const std::size_t entries = std::max(most_entries, 2 * batch.parameters_in_use);
    while (held_ + host.bytes() > parameter_budget_bytes() || entries_.size() >= entries) {
      auto oldest = entries_.end();
      for (auto e = entries_.begin(); e != entries_.end(); ++e)
        if (e->second.used + 1 < clock_ &&
            (oldest == entries_.end() || e->second.used < oldest->second.used))
          oldest = e;
      if (oldest == entries_.end()) break;
      held_ -= oldest->second.bytes;
      entries_.erase(oldest);
    }
    Entry& entry = entries_[key];
    entry.buffer = upload(transposed_copy ? transposed(host) : host);
    entry.bytes = host.bytes();
    entry.used = clock_;
    held_ += entry.bytes;
    return entry.buffer;
  }

 private:
  struct Entry {
    cuda::DeviceBuffer buffer;
    std::size_t bytes = 0;
    std::uint64_t used = 0;
  };
  std::map<std::string, Entry> entries_;
  std::size_t held_ = 0;
  std::uint64_t clock_ = 0;
};

using cuda_bench::rotation_sets;
using cuda_bench::time_rotated;

using cuda_bench::random_input;

}  // namespace bitcheck::cuda_support
