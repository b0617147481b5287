// CUDA buffers left on the device for the runner's comparisons (common/device_output_cuda.h).
#include "common/device_output_cuda.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

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
  for (std::size_t first = 0; first < slots.size();) {
    if (slots[first] < 0 || slots[first] >= slot_count)
      throw std::out_of_range("rows_at_slots: a slot outside the batch");
    std::size_t end = first + 1;
    while (end < slots.size() && slots[end] == slots[end - 1] + 1) ++end;
    if (slots[end - 1] >= slot_count)
      throw std::out_of_range("rows_at_slots: a slot outside the batch");
    cuda::copy_device_to_device(to + static_cast<std::size_t>(slots[first]) * row_bytes,
                                from + first * row_bytes, (end - first) * row_bytes);
    first = end;
  }
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
