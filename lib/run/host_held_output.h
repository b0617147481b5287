// A DeviceOutput (core/device_output.h) held in host memory: what the CPU backend's outputs become
// under BITCHECK_SIMULATE_DEVICE_OUTPUTS=1, so the runner's device path (gathering rows, comparing
// where the outputs are, bringing over only what differs) runs on every CPU case, in CI, with the
// same results as the host path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_output.h"
#include "core/tensor.h"

namespace bitcheck {

class HostHeldOutput : public DeviceOutput {
 public:
  explicit HostHeldOutput(Tensor tensor);
  HostHeldOutput(std::size_t bytes, std::uint32_t pattern, std::size_t element_bytes);
  std::size_t bytes() const override { return bytes_.size(); }
  void read(void* host, std::size_t offset, std::size_t count) const override;
  std::vector<std::int64_t> differing_parts(const DeviceOutput& other,
                                            std::size_t part_bytes) const override;
  std::shared_ptr<DeviceOutput> make_output(std::size_t bytes, std::uint32_t pattern,
                                            std::size_t element_bytes) const override;
  void copy_runs(const DeviceOutput& source, const std::vector<CopyRun>& runs) override;
  void copy_columns(const DeviceOutput& source, const ColumnCopy& copy) override;
  std::shared_ptr<DeviceOutput> converted(DType from, DType to) const override;

 private:
  std::vector<unsigned char, DefaultInitAllocator<unsigned char>> bytes_;
};

// BITCHECK_SIMULATE_DEVICE_OUTPUTS=1: a case of an impl without a device backend (the CPU's)
// leaves its outputs in HostHeldOutputs, as a device impl would leave them on its device.
bool simulate_device_outputs();

}  // namespace bitcheck
