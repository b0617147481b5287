// A CUDA buffer as a DeviceOutput (core/device_output.h): an impl's row outputs (at each
// invocation) or reduction accumulator (at the layout's last) handed to the runner instead of
// downloaded (hand_over_rows, hand_over_reduction), gathered and compared on the device
// (common/row_compare.h) and read back only where a check needs its values.
// Plain C++ (CUDA build only).
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  std::shared_ptr<DeviceOutput> make_output(std::size_t bytes, std::uint32_t pattern,
                                            std::size_t element_bytes) const override;
  void copy_runs(const DeviceOutput& source, const std::vector<CopyRun>& runs) override;
  void copy_columns(const DeviceOutput& source, const ColumnCopy& copy) override;
  std::shared_ptr<DeviceOutput> converted(DType from, DType to) const override;
  // The bytes where they are, for an impl that reads the output as an input (Batch::device_inputs).
  const void* data() const { return buffer_.get(); }

 private:
  cuda::DeviceBuffer buffer_;
  std::size_t bytes_;
};

// Output `name` of the batch from `buffer` (as many bytes as batch.out(name), in its layout: a row
// output's slots, pads included): left on the device as a CudaDeviceOutput when the runner asked
// for that (Batch::rows_stay_on_device, reductions_stay_on_device), the buffer moved out; else
// downloaded into batch.out(name), the buffer kept.
void hand_over_rows(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer);
void hand_over_reduction(Batch& batch, const std::string& name, cuda::DeviceBuffer& buffer);
// The rows of `packed` (one row of `row_bytes` per real slot, in slot order: `slots`) at their
// slots of a new buffer of `slot_count` rows, pad slots' rows 0xFF bytes (the dtype's NaN, as the
// runner poisons them): device copies on the default stream, consecutive slots in one. An impl
// that computes on its real rows packed hands its row outputs over in the batch's layout with it.
cuda::DeviceBuffer rows_at_slots(const cuda::DeviceBuffer& packed,
                                 const std::vector<std::int32_t>& slots, std::int64_t slot_count,
                                 std::size_t row_bytes);
// Row input `name` of the batch on the device, in its slots, pads included (as many bytes as the
// host tensor would hold): a copy of the batch's device input when a composed impl handed one
// over (Batch::device_inputs), else uploaded from the host.
cuda::DeviceBuffer input_rows(const Batch& batch, const std::string& name);
// The rows of input `name` at `slots`, packed in that order (compact_rows on the device when the
// input is there).
cuda::DeviceBuffer packed_input_rows(const Batch& batch, const std::string& name,
                                     const std::vector<std::int32_t>& slots);
// The size of row input `name`: its device input's or its host tensor's.
std::size_t input_bytes(const Batch& batch, const std::string& name);

// Several row outputs: left on the device, or brought back behind one wait for the GPU.
void hand_over_rows_all(Batch& batch,
                        std::initializer_list<std::pair<const char*, cuda::DeviceBuffer*>> outputs);

}  // namespace bitcheck::cuda_support
