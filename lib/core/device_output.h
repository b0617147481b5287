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

#include "core/dtype.h"

namespace bitcheck {

// `bytes` bytes from `source_offset` of one output to `offset` of another.
struct CopyRun {
  std::size_t source_offset = 0;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

// Part of every row of one output copied into every row of another: for r < rows, the `width`
// bytes at source_offset + r * source_pitch to offset + r * pitch (a column slice of row tensors,
// or one side of a concatenation).
struct ColumnCopy {
  std::size_t rows = 0;
  std::size_t source_pitch = 0, source_offset = 0;
  std::size_t pitch = 0, offset = 0;
  std::size_t width = 0;
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
  // The columns of `source` (an output of the same backend) copied into this one.
  virtual void copy_columns(const DeviceOutput& source, const ColumnCopy& copy) = 0;
  // A new output on the same device: every element of this one, read as `from`, converted to
  // `to` with the bits of core/dtype.h's conversions (fp32 to bf16 or fp16 rounds to nearest even
  // and keeps a NaN's sign and top payload bits; 16-bit to fp32 is exact; a dtype to itself is a
  // copy). Throws std::invalid_argument for any other pair or a size not a whole number of `from`.
  virtual std::shared_ptr<DeviceOutput> converted(DType from, DType to) const = 0;
};

// The checks of converted() and copy_columns() shared by every backend: the element count, or
// std::invalid_argument / std::out_of_range naming what is wrong.
std::size_t conversion_elements(std::size_t bytes, DType from, DType to);
void check_column_copy(const ColumnCopy& copy, std::size_t source_bytes, std::size_t bytes);

}  // namespace bitcheck
