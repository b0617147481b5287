// A device backend that generates row inputs where the impls read them: implemented beside
// DeviceBackend by a backend that can (CUDA: kernels/common/cuda_backend_cuda.cpp), found with a
// dynamic_cast of the Registry's DeviceBackend.
#pragma once
#include <cstdint>
#include <memory>

namespace bitcheck {

class DeviceOutput;
struct TensorDecl;

class DeviceInputSource {
 public:
  virtual ~DeviceInputSource() = default;
  // Logical rows [0, rows) of row input `decl` generated on the device with the host generator's
  // bits (run/input_generator.h), for an impl that reads its row inputs there
  // (ImplInfo::row_inputs_on_device), or nullptr where it cannot: no device, or not a uniform
  // float tensor (token ids and indices are drawn on the host).
  virtual std::shared_ptr<DeviceOutput> generated_rows(const TensorDecl& decl, std::int64_t rows,
                                                       std::uint64_t seed,
                                                       double special_value_rate) const = 0;
};

}  // namespace bitcheck
