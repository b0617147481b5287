// CUDA buffers left on the device for the runner's comparisons (common/device_output_cuda.h).
#include "common/device_output_cuda.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "common/adapter_support.h"
#include "common/device_glue.h"
#include "common/row_compare.h"

namespace bitcheck::cuda_support {

CudaDeviceOutput::CudaDeviceOutput(cuda::DeviceBuffer buffer, std::size_t bytes)
    : buffer_(std::move(buffer)), bytes_(bytes) {
  if (bytes_ > buffer_.bytes())
    throw std::invalid_argument("CudaDeviceOutput: more bytes than the buffer holds");
}

void CudaDeviceOutput::read(void* host, std::size_t offset, std::size_t count) const {
  if (offset > bytes_ || count > bytes_ - offset)
    throw std::out_of_range("CudaDeviceOutput::read past the output's end");
  if (count == 0) return;
  cuda::copy_to_host_all(
      {{host, static_cast<const unsigned char*>(buffer_.get()) + offset, count}});
}

std::vector<std::int64_t> CudaDeviceOutput::differing_parts(const DeviceOutput& other,
                                                            std::size_t part_bytes) const {
  const auto* device = dynamic_cast<const CudaDeviceOutput*>(&other);
  if (!device)
    throw std::invalid_argument("differing_parts: the other output is not on a CUDA device");
  if (device->bytes_ != bytes_)
    throw std::invalid_argument("differing_parts: outputs of " + std::to_string(bytes_) + " and " +
                                std::to_string(device->bytes_) + " bytes");
  // The impls' streams are done with both (a synchronous copy or a synchronize ended each call).
  cuda::synchronize();
  return cuda::differing_parts_on_device(device->buffer_.get(), buffer_.get(), bytes_, part_bytes);
}

std::shared_ptr<DeviceOutput> CudaDeviceOutput::make_output(std::size_t bytes,
                                                            std::uint32_t pattern,
                                                            std::size_t element_bytes) const {
  cuda::DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
  cuda::fill_pattern_on_device(buffer.get(), bytes, pattern, element_bytes);
  // Done before the impl's next call starts: kernel provenance gives a call the kernels that
  // started after it began, and this one is the runner's.
  cuda::synchronize();
  return std::make_shared<CudaDeviceOutput>(std::move(buffer), bytes);
}

void CudaDeviceOutput::copy_runs(const DeviceOutput& source, const std::vector<CopyRun>& runs) {
  const auto* device = dynamic_cast<const CudaDeviceOutput*>(&source);
  if (!device) throw std::invalid_argument("copy_runs: the source is not on a CUDA device");
  for (const CopyRun& run : runs) {
    if (run.source_offset + run.bytes > device->bytes_ || run.offset + run.bytes > bytes_)
      throw std::out_of_range("copy_runs: a run past an output's end");
    cuda::copy_device_to_device(
        static_cast<unsigned char*>(buffer_.get()) + run.offset,
        static_cast<const unsigned char*>(device->buffer_.get()) + run.source_offset, run.bytes);
  }
  // No wait here: a reader of the output (the runner's comparison, an impl's input_rows) orders
  // itself after these copies on the same stream or synchronizes first.
}

void CudaDeviceOutput::copy_columns(const DeviceOutput& source, const ColumnCopy& copy) {
  const auto* device = dynamic_cast<const CudaDeviceOutput*>(&source);
  if (!device) throw std::invalid_argument("copy_columns: the source is not on a CUDA device");
  check_column_copy(copy, device->bytes_, bytes_);
  cuda::copy_columns_on_device(
      static_cast<unsigned char*>(buffer_.get()) + copy.offset, copy.pitch,
      static_cast<const unsigned char*>(device->buffer_.get()) + copy.source_offset,
      copy.source_pitch, copy.width, copy.rows);
  cuda::synchronize();
}

std::shared_ptr<DeviceOutput> CudaDeviceOutput::converted(DType from, DType to) const {
  const std::size_t count = conversion_elements(bytes_, from, to);
  const std::size_t bytes = count * dtype_size(to);
  cuda::DeviceBuffer out(std::max<std::size_t>(bytes, 16));
  cuda::convert_on_device(buffer_.get(), device_dtype(from), out.get(), device_dtype(to), count);
  cuda::synchronize();
  return std::make_shared<CudaDeviceOutput>(std::move(out), bytes);
}

namespace {
const CudaDeviceOutput* device_input(const Batch& batch, const std::string& name) {
  auto found = batch.device_inputs.find(name);
  if (found == batch.device_inputs.end()) return nullptr;
  const auto* device = dynamic_cast<const CudaDeviceOutput*>(found->second.get());
  if (!device)
    throw std::invalid_argument("input " + name + " is on a device that is not this CUDA device");
  return device;
}

// Calls copy(i, slot, count) for each run of `slots` from index i on whose `count` slots follow
// one another from `slot` (each slot in [0, slot_count), else std::out_of_range naming `what`).
template <typename Copy>
void for_each_slot_run(const std::vector<std::int32_t>& slots, std::int64_t slot_count,
                       const char* what, Copy copy) {
  for (std::size_t first = 0; first < slots.size();) {
    std::size_t end = first + 1;
    while (end < slots.size() && slots[end] == slots[end - 1] + 1) ++end;
    if (slots[first] < 0 || slots[end - 1] >= slot_count)
      throw std::out_of_range(std::string(what) + ": a slot outside the batch");
    copy(first, static_cast<std::size_t>(slots[first]), end - first);
    first = end;
  }
}
}  // namespace

cuda::DeviceBuffer input_rows(const Batch& batch, const std::string& name) {
  const CudaDeviceOutput* device = device_input(batch, name);
  if (!device) return upload(batch.in(name));
  cuda::DeviceBuffer copy(std::max<std::size_t>(device->bytes(), 16));
  cuda::copy_device_to_device(copy.get(), device->data(), device->bytes());
  cuda::synchronize();  // the copy (default stream) done before the impl's streams read it
  return copy;
}

cuda::DeviceBuffer packed_input_rows(const Batch& batch, const std::string& name,
                                     const std::vector<std::int32_t>& slots) {
  const CudaDeviceOutput* device = device_input(batch, name);
  if (!device) return upload(compact_rows(batch.in(name), slots));
  const std::size_t row_bytes = device->bytes() / static_cast<std::size_t>(batch.slots());
  cuda::DeviceBuffer packed(std::max<std::size_t>(slots.size() * row_bytes, 16));
  const auto* from = static_cast<const unsigned char*>(device->data());
  auto* to = static_cast<unsigned char*>(packed.get());
  for_each_slot_run(slots, batch.slots(), "packed_input_rows",
                    [&](std::size_t index, std::size_t slot, std::size_t count) {
                      cuda::copy_device_to_device(to + index * row_bytes, from + slot * row_bytes,
                                                  count * row_bytes);
                    });
  cuda::synchronize();
  return packed;
}

std::size_t input_bytes(const Batch& batch, const std::string& name) {
  if (const CudaDeviceOutput* device = device_input(batch, name)) return device->bytes();
  return batch.in(name).bytes();
}

namespace {
void hand_over(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer, bool asked) {
  Tensor& output = batch.out(name);
  if (!asked) {
    buffer.download(output.data(), output.bytes());
    return;
  }
  cuda::synchronize();  // the output is complete before the runner reads it from another stream
  batch.device_outputs[name] =
      std::make_shared<CudaDeviceOutput>(std::move(buffer), output.bytes());
}
}  // namespace

void hand_over_rows(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer) {
  hand_over(batch, name, buffer, batch.rows_stay_on_device);
}

void hand_over_reduction(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer) {
  hand_over(batch, name, buffer, batch.reductions_stay_on_device);
}

cuda::DeviceBuffer rows_at_slots(const cuda::DeviceBuffer& packed,
                                 const std::vector<std::int32_t>& slots, std::int64_t slot_count,
                                 std::size_t row_bytes) {
  if (slots.size() * row_bytes > packed.bytes())
    throw std::invalid_argument("rows_at_slots: more rows than the packed buffer holds");
  const std::size_t bytes = static_cast<std::size_t>(slot_count) * row_bytes;
  cuda::DeviceBuffer out(std::max<std::size_t>(bytes, 16));
  out.fill_bytes(0xFF);
  const auto* from = static_cast<const unsigned char*>(packed.get());
  auto* to = static_cast<unsigned char*>(out.get());
  for_each_slot_run(slots, slot_count, "rows_at_slots",
                    [&](std::size_t index, std::size_t slot, std::size_t count) {
                      cuda::copy_device_to_device(to + slot * row_bytes, from + index * row_bytes,
                                                  count * row_bytes);
                    });
  return out;
}

void hand_over_rows_all(
    Batch& batch, std::initializer_list<std::pair<const char*, cuda::DeviceBuffer*>> outputs) {
  if (batch.rows_stay_on_device) {
    for (const auto& [name, buffer] : outputs) hand_over(batch, name, *buffer, true);
    return;
  }
  std::vector<cuda::HostCopy> copies;
  for (const auto& [name, buffer] : outputs) {
    Tensor& output = batch.out(name);
    if (output.bytes() > buffer->bytes())
      throw std::invalid_argument(std::string("hand_over_rows_all: ") + name +
                                  " holds more bytes than its buffer");
    copies.push_back({output.data(), buffer->get(), output.bytes()});
  }
  cuda::copy_to_host_all(copies);
}

}  // namespace bitcheck::cuda_support
