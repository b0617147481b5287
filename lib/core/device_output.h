// An output an impl left where it was made (a device impl's reduction accumulator, an invocation's
// row output): the runner gathers a layout's rows there, compares them against another layout's
// and brings bytes to the host only where a check reads values (the canonical layouts, a drift's
// rows, a dump). A backend with a device implements it (kernels/common/device_output_cuda.h for
// CUDA); the harness sees only this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace bitcheck {

// `bytes` bytes from `source_offset` of one output to `offset` of another.
struct CopyRun {
  std::size_t source_offset = 0;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

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
  // A new output of `bytes` on the same device, each element of `element_bytes` (1, 2 or 4) set
  // to the low bytes of `pattern` (the runner's poison: the dtype's NaN).
  virtual std::shared_ptr<DeviceOutput> make_output(std::size_t bytes, std::uint32_t pattern,
                                                    std::size_t element_bytes) const = 0;
  // The runs of `source` (an output of the same backend) copied into this one.
  virtual void copy_runs(const DeviceOutput& source, const std::vector<CopyRun>& runs) = 0;
};

}  // namespace bitcheck
