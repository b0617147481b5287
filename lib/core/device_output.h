// An output an impl left where it was made (a device impl's reduction accumulator): the runner
// compares it there against the same output of another layout and brings bytes to the host only
// where a check reads values (the canonical layouts, a drift's metrics, a dump). A backend with a
// device implements it (kernels/common/device_output_cuda.h for CUDA); the harness sees only this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bitcheck {

class DeviceOutput {
 public:
  virtual ~DeviceOutput() = default;
  virtual std::size_t bytes() const = 0;
  // Bytes [offset, offset + count) into `host`.
  virtual void read(void* host, std::size_t offset, std::size_t count) const = 0;
  // The parts [i * part_bytes, min((i + 1) * part_bytes, bytes())) in which this output and
  // `other` (as many bytes, the same backend) differ in any bit, in increasing order: empty when
  // the two are bitwise equal. Throws std::invalid_argument for another backend's output or
  // another size.
  virtual std::vector<std::int64_t> differing_parts(const DeviceOutput& other,
                                                    std::size_t part_bytes) const = 0;
};

}  // namespace bitcheck
