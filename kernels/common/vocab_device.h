// Host-side helpers shared by the CUDA adapters of the vocabulary ops (embedding, lm_head,
// logprob, lm_head_logprob): the device error record and a process-wide parameter cache (so a tied
// table is one device buffer for every op), beside the helpers of adapter_support.h. Header-only,
// host compiler, no CUDA headers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "adapter_support.h"
#include "bench_support.h"
#include "core/op.h"
#include "runtime.h"

namespace bitcheck::vocab_device {

using cuda_support::carried_accumulator;
using cuda_support::compact_rows;
using cuda_support::device_dtype;
using cuda_support::download;
using cuda_support::download_after_last;
using cuda_support::input_rows;
using cuda_support::packed_input_rows;
using cuda_support::real_slot_list;
using cuda_support::transposed;
using cuda_support::upload;

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
  auto device = std::make_shared<const cuda::DeviceBuffer>(transform ? upload(transform(*host))
                                                                     : upload(*host));
  // At most 4 entries within the process's share of the GPU (parameter_budget_bytes): a
  // vocabulary table is up to 2 GB, and a dozen shards share a GPU.
  std::size_t held = device->bytes();
  for (const Entry& entry : cache) held += entry.device->bytes();
  while (!cache.empty() && (cache.size() >= 4 || held > cuda_support::parameter_budget_bytes())) {
    held -= cache.front().device->bytes();
    cache.erase(cache.begin());
  }
  cache.push_back({host, variant, device});
  return device;
}

using cuda_bench::random_input;
using cuda_bench::rotation_sets;
using cuda_bench::time_rotated;

}  // namespace bitcheck::vocab_device
