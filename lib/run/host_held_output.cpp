// Outputs held in host memory behind the device-output interface (run/host_held_output.h).
#include "run/host_held_output.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace bitcheck {

HostHeldOutput::HostHeldOutput(Tensor tensor) : bytes_(tensor.bytes()) {
  std::memcpy(bytes_.data(), tensor.data(), tensor.bytes());
}

HostHeldOutput::HostHeldOutput(std::size_t bytes, std::uint32_t pattern, std::size_t element_bytes)
    : bytes_(bytes) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4)
    throw std::invalid_argument("HostHeldOutput: elements of " + std::to_string(element_bytes) +
                                " bytes");
  for (std::size_t at = 0; at + element_bytes <= bytes; at += element_bytes)
    std::memcpy(bytes_.data() + at, &pattern, element_bytes);
}

void HostHeldOutput::read(void* host, std::size_t offset, std::size_t count) const {
  if (offset > bytes_.size() || count > bytes_.size() - offset)
    throw std::out_of_range("HostHeldOutput::read past the output's end");
  if (count) std::memcpy(host, bytes_.data() + offset, count);
}

std::vector<std::int64_t> HostHeldOutput::differing_parts(const DeviceOutput& other,
                                                          std::size_t part_bytes) const {
  const auto* held = dynamic_cast<const HostHeldOutput*>(&other);
  if (!held) throw std::invalid_argument("differing_parts: the other output is not host-held");
  if (held->bytes() != bytes())
    throw std::invalid_argument("differing_parts: outputs of " + std::to_string(bytes()) + " and " +
                                std::to_string(held->bytes()) + " bytes");
  if (part_bytes == 0) throw std::invalid_argument("differing_parts: parts of 0 bytes");
  std::vector<std::int64_t> parts;
  for (std::size_t at = 0, part = 0; at < bytes(); at += part_bytes, ++part) {
    const std::size_t count = std::min(part_bytes, bytes() - at);
    if (std::memcmp(bytes_.data() + at, held->bytes_.data() + at, count) != 0)
      parts.push_back(static_cast<std::int64_t>(part));
  }
  return parts;
}

std::shared_ptr<DeviceOutput> HostHeldOutput::make_output(std::size_t bytes, std::uint32_t pattern,
                                                          std::size_t element_bytes) const {
  return std::make_shared<HostHeldOutput>(bytes, pattern, element_bytes);
}

void HostHeldOutput::copy_runs(const DeviceOutput& source, const std::vector<CopyRun>& runs) {
  const auto* held = dynamic_cast<const HostHeldOutput*>(&source);
  if (!held) throw std::invalid_argument("copy_runs: the source is not host-held");
  for (const CopyRun& run : runs) {
    if (run.source_offset + run.bytes > held->bytes() || run.offset + run.bytes > bytes())
      throw std::out_of_range("copy_runs: a run past an output's end");
    std::memcpy(bytes_.data() + run.offset, held->bytes_.data() + run.source_offset, run.bytes);
  }
}

void HostHeldOutput::copy_columns(const DeviceOutput& source, const ColumnCopy& copy) {
  const auto* held = dynamic_cast<const HostHeldOutput*>(&source);
  if (!held) throw std::invalid_argument("copy_columns: the source is not host-held");
  check_column_copy(copy, held->bytes(), bytes());
  for (std::size_t r = 0; r < copy.rows && copy.width; ++r) {
    std::memcpy(bytes_.data() + copy.offset + r * copy.pitch,
                held->bytes_.data() + copy.source_offset + r * copy.source_pitch, copy.width);
  }
}

std::shared_ptr<DeviceOutput> HostHeldOutput::converted(DType from, DType to) const {
  const std::size_t count = conversion_elements(bytes(), from, to);
  auto result = std::make_shared<HostHeldOutput>(count * dtype_size(to), 0u, 1);
  unsigned char* out = result->bytes_.data();
  const unsigned char* in = bytes_.data();
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, in + i * dtype_size(from), dtype_size(from));
    // decode_bits and encode_bits: the host's conversions, bit for bit (a float copied as bits).
    const std::uint32_t converted = from == to ? bits : encode_bits(to, decode_bits(from, bits));
    std::memcpy(out + i * dtype_size(to), &converted, dtype_size(to));
  }
  return result;
}

bool simulate_device_outputs() {
  const char* value = std::getenv("BITCHECK_SIMULATE_DEVICE_OUTPUTS");
  return value && std::string(value) == "1";
}

}  // namespace bitcheck
