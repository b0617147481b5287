// DeviceStaging: where the tensors of an external impl's calls live on the device (parameters kept
// by input id, one arena for row tensors and outputs), and the retirement of allocations another
// process may still have open.
#include "external/external_device.h"

#include <algorithm>
#include <stdexcept>

#include "core/error.h"

namespace bitcheck {
namespace {

bool is_output(TensorRole role) {
  return role == TensorRole::row_output || role == TensorRole::reduction_output;
}

// The full shape of a declared tensor at `rows` rows (row tensors), or its own (the others).
std::vector<std::int64_t> shape_at(const TensorDecl& decl, std::int64_t rows) {
  if (decl.role != TensorRole::row_input && decl.role != TensorRole::row_output) return decl.shape;
  std::vector<std::int64_t> shape = {rows};
  shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
  return shape;
}

std::size_t bytes_of(const std::vector<std::int64_t>& shape, DType dtype) {
  std::size_t count = 1;
  for (std::int64_t extent : shape) count *= static_cast<std::size_t>(extent);
  return count * dtype_size(dtype);
}

}  // namespace

void ExternalDeviceMemory::run_captured(const std::function<void()>&) {
  throw CaptureUnsupported("the " + handle_kind() + " device memory has no CUDA graphs");
}

std::size_t aligned_end(std::size_t offset, std::size_t bytes) {
  const std::size_t end = offset + bytes;
  return (end + DeviceStaging::alignment - 1) / DeviceStaging::alignment * DeviceStaging::alignment;
}

std::size_t benchmark_set_bytes(const CaseSpec& spec, const std::vector<TensorDecl>& decls) {
  std::size_t bytes = 0;
  for (const TensorDecl& decl : decls) bytes += bytes_of(shape_at(decl, spec.rows), decl.dtype);
  return bytes;
}

std::size_t benchmark_sets(std::size_t set_bytes, const BenchSettings& settings,
                           std::optional<std::size_t> free_bytes) {
  set_bytes = std::max<std::size_t>(set_bytes, 1);
  std::size_t sets =
      std::clamp<std::size_t>((settings.rotate_bytes + set_bytes - 1) / set_bytes + 1, 1, 64);
  if (free_bytes) sets = std::min(sets, std::max<std::size_t>(1, *free_bytes / 2 / set_bytes));
  return sets;
}

DeviceStaging::~DeviceStaging() {
  release_retired();
  for (auto& [id, allocation] : live_) memory_.release(allocation.base);
}

DeviceAllocation& DeviceStaging::new_allocation(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, alignment);
  DeviceAllocation allocation;
  allocation.id = next_id_++;
  allocation.base = memory_.allocate(bytes);
  allocation.bytes = bytes;
  return live_.emplace(allocation.id, allocation).first->second;
}

void DeviceStaging::retire(std::uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  retired_.push_back(it->second);
  live_.erase(it);
}

DeviceAllocation& DeviceStaging::parameter(const Batch& batch, const TensorDecl& decl,
                                           const Tensor& tensor) {
  auto id = batch.input_ids.find(decl.name);
  const std::string key =
      decl.name + "#" + (id == batch.input_ids.end() ? "none" : std::to_string(id->second));
  if (id != batch.input_ids.end()) {
    for (const auto& [cached_key, allocation] : parameters_) {
      if (cached_key == key) return live_.at(allocation);
    }
  }
  if (parameters_.size() >= cached_parameters) {
    retire(parameters_.front().second);
    parameters_.erase(parameters_.begin());
  }
  DeviceAllocation& allocation = new_allocation(tensor.bytes());
  memory_.upload(allocation.base, tensor.data(), tensor.bytes());
  // A tensor without an id cannot be recognized again: it is uploaded on every call.
  if (id != batch.input_ids.end()) {
    parameters_.emplace_back(key, allocation.id);
  } else {
    parameters_.emplace_back(key + "#" + std::to_string(allocation.id), allocation.id);
  }
  return allocation;
}

std::vector<StagedTensor> DeviceStaging::stage(Batch& batch, const std::vector<TensorDecl>& decls) {
  std::vector<StagedTensor> staged;
  std::vector<const Tensor*> hosts;
  std::size_t arena_bytes = 0;
  for (const TensorDecl& decl : decls) {
    const Tensor& host = is_output(decl.role) ? batch.out(decl.name) : batch.in(decl.name);
    StagedTensor tensor;
    tensor.name = decl.name;
    tensor.role = decl.role;
    tensor.dtype = host.dtype();
    tensor.shape = host.shape();
    tensor.bytes = host.bytes();
    if (decl.role != TensorRole::parameter) {
      tensor.offset = arena_bytes;
      arena_bytes = aligned_end(arena_bytes, tensor.bytes);
    }
    staged.push_back(std::move(tensor));
    hosts.push_back(&host);
  }
  if (arena_ == 0 || live_.at(arena_).bytes < arena_bytes) {
    if (arena_ != 0) retire(arena_);
    // Headroom, so the layouts of a case (one row alone, then the whole batch, then padded) do not
    // each replace the arena.
    arena_ = new_allocation(arena_bytes + arena_bytes / 2).id;
  }
  for (std::size_t i = 0; i < decls.size(); ++i) {
    StagedTensor& tensor = staged[i];
    const Tensor& host = *hosts[i];
    const DeviceAllocation& allocation = decls[i].role == TensorRole::parameter
                                             ? parameter(batch, decls[i], host)
                                             : live_.at(arena_);
    tensor.allocation = allocation.id;
    tensor.data = static_cast<unsigned char*>(allocation.base) + tensor.offset;
    const bool skipped = decls[i].role == TensorRole::reduction_output && !batch.reductions_wanted;
    if (decls[i].role != TensorRole::parameter && !skipped) {
      memory_.upload(tensor.data, host.data(), tensor.bytes);
    }
  }
  memory_.synchronize();
  return staged;
}

void DeviceStaging::download_outputs(Batch& batch, const std::vector<StagedTensor>& staged) {
  for (const StagedTensor& tensor : staged) {
    if (!is_output(tensor.role)) continue;
    if (tensor.role == TensorRole::reduction_output && !batch.reductions_wanted) continue;
    Tensor& host = batch.out(tensor.name);
    if (host.bytes() != tensor.bytes) {
      throw std::logic_error("staged tensor " + tensor.name + " changed size");
    }
    memory_.download(host.data(), tensor.data, tensor.bytes);
  }
}

std::vector<std::vector<StagedTensor>> DeviceStaging::stage_random(
    const CaseSpec& spec, const std::vector<TensorDecl>& decls, std::size_t sets) {
  std::vector<std::vector<StagedTensor>> result;
  for (std::size_t set = 0; set < sets; ++set) {
    std::vector<StagedTensor> tensors;
    std::size_t bytes = 0;
    for (const TensorDecl& decl : decls) {
      StagedTensor tensor;
      tensor.name = decl.name;
      tensor.role = decl.role;
      tensor.dtype = decl.dtype;
      tensor.shape = shape_at(decl, spec.rows);
      tensor.bytes = bytes_of(tensor.shape, decl.dtype);
      tensor.offset = bytes;
      bytes = aligned_end(bytes, tensor.bytes);
      tensors.push_back(std::move(tensor));
    }
    const DeviceAllocation& allocation = new_allocation(bytes);
    for (std::size_t i = 0; i < decls.size(); ++i) {
      StagedTensor& tensor = tensors[i];
      const TensorDecl& decl = decls[i];
      tensor.allocation = allocation.id;
      tensor.data = static_cast<unsigned char*>(allocation.base) + tensor.offset;
      const std::size_t count = tensor.bytes / dtype_size(decl.dtype);
      const std::uint64_t seed = 1 + set * 131 + i;
      if (is_output(decl.role)) {
        std::vector<unsigned char> zeros(tensor.bytes, 0);
        memory_.upload(tensor.data, zeros.data(), zeros.size());
      } else if (decl.generator == Generator::index || !is_floating(decl.dtype)) {
        const auto bound = static_cast<std::uint64_t>(std::max<std::int64_t>(decl.index_bound, 1));
        std::vector<std::int32_t> values(count);
        for (std::size_t e = 0; e < count; ++e) {
          values[e] = static_cast<std::int32_t>((e * 2654435761u + seed * 40503u) % bound);
        }
        memory_.upload(tensor.data, values.data(), tensor.bytes);
      } else {
        memory_.fill_random(tensor.data, count, decl.dtype, seed);
      }
    }
    result.push_back(std::move(tensors));
  }
  memory_.synchronize();
  return result;
}

const DeviceAllocation& DeviceStaging::allocation_of(const StagedTensor& tensor) const {
  return live_.at(tensor.allocation);
}

const std::string& DeviceStaging::handle(const StagedTensor& tensor) {
  DeviceAllocation& allocation = live_.at(tensor.allocation);
  if (allocation.handle.empty()) allocation.handle = memory_.export_handle(allocation.base);
  return allocation.handle;
}

std::vector<std::string> DeviceStaging::exported_handles() const {
  std::vector<std::string> handles;
  for (const auto& [id, allocation] : live_) {
    if (!allocation.handle.empty()) handles.push_back(allocation.handle);
  }
  return handles;
}

std::vector<std::string> DeviceStaging::retired_handles() const {
  std::vector<std::string> handles;
  for (const DeviceAllocation& allocation : retired_) {
    if (!allocation.handle.empty()) handles.push_back(allocation.handle);
  }
  return handles;
}

void DeviceStaging::release_retired() {
  for (const DeviceAllocation& allocation : retired_) memory_.release(allocation.base);
  retired_.clear();
}

}  // namespace bitcheck
