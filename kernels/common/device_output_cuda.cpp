// CUDA buffers left on the device for the runner's comparisons (common/device_output_cuda.h).
#include "common/device_output_cuda.h"

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

void hand_over(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer) {
  Tensor& output = batch.out(name);
  if (!batch.outputs_stay_on_device) {
    buffer.download(output.data(), output.bytes());
    return;
  }
  cuda::synchronize();  // the output is complete before the runner reads it from another stream
  batch.device_outputs[name] =
      std::make_shared<const CudaDeviceOutput>(std::move(buffer), output.bytes());
}

}  // namespace bitcheck::cuda_support
