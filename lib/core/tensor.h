// Host tensors: raw bytes of one dtype, row-major, first dimension = rows (tokens or slots).
// Values are read and written through the dtype's conversions; comparisons use the raw bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace bitcheck {

// A std::allocator whose value-less construct leaves the element as it is: the storage's resize
// does not zero bytes the constructors are about to write.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* at) noexcept {
    ::new (static_cast<void*>(at)) U;
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

class Tensor {
 public:
  struct Uninitialized {};
  static constexpr Uninitialized uninitialized{};

  Tensor() = default;
  Tensor(DType dtype, std::vector<std::int64_t> shape);  // every element's bits zero
  // Bytes left as the allocator gives them, for a tensor whose every element is written next.
  Tensor(DType dtype, std::vector<std::int64_t> shape, Uninitialized);
  // Every element poisoned (fill_nan), written once.
  static Tensor poisoned(DType dtype, std::vector<std::int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  std::int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  std::int64_t row_size() const { return rows() == 0 ? 0 : numel_ / rows(); }
  std::size_t bytes() const { return data_.size(); }

  float get(std::int64_t index) const;
  void set(std::int64_t index, float value);  // rounds to the dtype
  std::uint32_t bits(std::int64_t index) const;
  void set_bits(std::int64_t index, std::uint32_t bits);
  std::int32_t get_int(std::int64_t index) const { return static_cast<std::int32_t>(bits(index)); }
  void set_int(std::int64_t index, std::int32_t value) {
    set_bits(index, static_cast<std::uint32_t>(value));
  }

  void* data() { return data_.data(); }
  const void* data() const { return data_.data(); }
  // Poison: quiet NaN in every element (or INT32_MIN for i32); large tensors on several threads.
  void fill_nan();
  std::vector<float> to_floats() const;

  // Copies row `source_row` of `source` into row `row` of this tensor (same dtype and row size).
  void copy_row_from(const Tensor& source, std::int64_t source_row, std::int64_t row);
  bool bitwise_equal(const Tensor& other) const;
  // The same elements under another shape of as many elements (a reduction flattened to one row
  // and back), without copying them.
  void reshape(std::vector<std::int64_t> shape);

 private:
  DType dtype_ = DType::fp32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::vector<std::byte, DefaultInitAllocator<std::byte>> data_;
};

std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace bitcheck
