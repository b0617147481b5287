// A CUDA buffer as a DeviceOutput (core/device_output.h): a reduction accumulator an impl hands
// to the runner at the layout's last invocation instead of downloading it (hand_over), compared
// on the device (common/row_compare.h) and read back only where a check needs its values.
// Plain C++ (CUDA build only).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "common/runtime.h"
#include "core/device_output.h"
#include "core/op.h"

namespace bitcheck::cuda_support {

class CudaDeviceOutput : public DeviceOutput {
 public:
  // The first `bytes` of `buffer`, which the output now owns.
  CudaDeviceOutput(cuda::DeviceBuffer buffer, std::size_t bytes);
  std::size_t bytes() const override { return bytes_; }
  void read(void* host, std::size_t offset, std::size_t count) const override;
  std::vector<std::int64_t> differing_parts(const DeviceOutput& other,
                                            std::size_t part_bytes) const override;

 private:
  cuda::DeviceBuffer buffer_;
  std::size_t bytes_;
};

// Output `name` of the batch from `buffer` (as many bytes as batch.out(name)): left on the device
// as a CudaDeviceOutput when the runner asked for that (Batch::outputs_stay_on_device), the buffer
// moved out; else downloaded into batch.out(name), the buffer kept.
void hand_over(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer);

}  // namespace bitcheck::cuda_support
