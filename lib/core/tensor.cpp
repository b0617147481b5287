// Host tensor storage and element access through dtype conversions.
#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "core/host_threads.h"

namespace bitcheck {

// Zeroing and poisoning split tensors into parts of at least this many bytes.
constexpr std::size_t fill_part_floor = std::size_t(16) << 20;

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape, Uninitialized)
    : dtype_(dtype), shape_(std::move(shape)), numel_(1) {
  for (std::int64_t extent : shape_) {
    if (extent < 0) throw std::invalid_argument("negative tensor extent");
    numel_ *= extent;
  }
  data_.resize(static_cast<std::size_t>(numel_) * dtype_size(dtype_));
}

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape)
    : Tensor(dtype, std::move(shape), uninitialized) {
  // Large tensors on several threads: first touches of fresh pages dominate there.
  run_in_parts(data_.size(), dtype_size(dtype_), fill_part_floor,
               [this](std::size_t first, std::size_t last) {
                 std::memset(data_.data() + first, 0, last - first);
               });
}

Tensor Tensor::poisoned(DType dtype, std::vector<std::int64_t> shape) {
  Tensor tensor(dtype, std::move(shape), uninitialized);
  tensor.fill_nan();
  return tensor;
}

void Tensor::reshape(std::vector<std::int64_t> shape) {
  std::int64_t numel = 1;
  for (std::int64_t extent : shape) {
    if (extent < 0) throw std::invalid_argument("negative tensor extent");
    numel *= extent;
  }
  if (numel != numel_) {
    throw std::invalid_argument("reshaping " + std::to_string(numel_) + " elements to " +
                                shape_string(shape));
  }
  shape_ = std::move(shape);
}

std::uint32_t Tensor::bits(std::int64_t index) const {
  const std::byte* p = data_.data() + static_cast<std::size_t>(index) * dtype_size(dtype_);
  if (dtype_size(dtype_) == 2) {
    std::uint16_t half;
    std::memcpy(&half, p, 2);
    return half;
  }
  std::uint32_t word;
  std::memcpy(&word, p, 4);
  return word;
}

void Tensor::set_bits(std::int64_t index, std::uint32_t value_bits) {
  std::byte* p = data_.data() + static_cast<std::size_t>(index) * dtype_size(dtype_);
  if (dtype_size(dtype_) == 2) {
    auto half = static_cast<std::uint16_t>(value_bits);
    std::memcpy(p, &half, 2);
  } else {
    std::memcpy(p, &value_bits, 4);
  }
}

float Tensor::get(std::int64_t index) const {
  return decode_bits(dtype_, bits(index));
}
void Tensor::set(std::int64_t index, float value) {
  set_bits(index, encode_bits(dtype_, value));
}

void Tensor::fill_nan() {
  std::uint32_t poison = dtype_ == DType::i32
                             ? static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::min())
                             : encode_bits(dtype_, std::numeric_limits<float>::quiet_NaN());
  const std::size_t width = dtype_size(dtype_);
  if (numel_ == 0) return;
  std::byte pattern[4];
  std::memcpy(
      pattern, &poison,
      width);  // the element's bytes, little-endian as set_bits writes
               // Doubling copies: a pattern fill at memcpy speed (GPU-sized tensors are gigabytes).
  run_in_parts(data_.size(), width, fill_part_floor, [&](std::size_t first, std::size_t last) {
    std::memcpy(data_.data() + first, pattern, width);
    std::size_t filled = width;
    while (first + filled < last) {
      const std::size_t chunk = std::min(filled, last - first - filled);
      std::memcpy(data_.data() + first + filled, data_.data() + first, chunk);
      filled += chunk;
    }
  });
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> values(static_cast<std::size_t>(numel_));
  for (std::int64_t i = 0; i < numel_; ++i) values[static_cast<std::size_t>(i)] = get(i);
  return values;
}

void Tensor::copy_row_from(const Tensor& source, std::int64_t source_row, std::int64_t row) {
  if (source.dtype_ != dtype_ || source.row_size() != row_size()) {
    throw std::invalid_argument("copy_row_from: dtype or row size mismatch");
  }
  std::size_t row_bytes = static_cast<std::size_t>(row_size()) * dtype_size(dtype_);
  std::memcpy(data_.data() + static_cast<std::size_t>(row) * row_bytes,
              source.data_.data() + static_cast<std::size_t>(source_row) * row_bytes, row_bytes);
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && data_ == other.data_;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ",";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

}  // namespace bitcheck
