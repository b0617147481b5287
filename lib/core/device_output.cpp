// The checks every DeviceOutput backend shares (core/device_output.h).
#include "core/device_output.h"

#include <stdexcept>
#include <string>

namespace bitcheck {

std::size_t conversion_elements(std::size_t bytes, DType from, DType to) {
  const bool narrowing = from == DType::fp32 && (to == DType::bf16 || to == DType::fp16);
  const bool widening = (from == DType::bf16 || from == DType::fp16) && to == DType::fp32;
  if (!narrowing && !widening && from != to) {
    throw std::invalid_argument("converted: no conversion from " + to_string(from) + " to " +
                                to_string(to));
  }
  if (bytes % dtype_size(from) != 0) {
    throw std::invalid_argument("converted: " + std::to_string(bytes) + " bytes are not whole " +
                                to_string(from) + " elements");
  }
  return bytes / dtype_size(from);
}

void check_column_copy(const ColumnCopy& copy, std::size_t source_bytes, std::size_t bytes) {
  if (copy.rows == 0 || copy.width == 0) return;
  if (copy.width > copy.source_pitch || copy.width > copy.pitch)
    throw std::invalid_argument("copy_columns: columns wider than a row");
  const std::size_t last = copy.rows - 1;
  if (copy.source_offset + last * copy.source_pitch + copy.width > source_bytes ||
      copy.offset + last * copy.pitch + copy.width > bytes)
    throw std::out_of_range("copy_columns: a row past an output's end");
}

}  // namespace bitcheck
