// Special input values: NaN (several payloads), +Inf, -Inf, subnormals of the tensor's dtype and
// -0, mixed into row inputs at a chosen rate. Which element gets which value is a pure function of
// (seed, tensor name, logical row, column), so every layout presents the same special values.
#pragma once
#include <cstdint>
#include <string>

#include "core/counter_hash.h"
#include "core/dtype.h"

namespace bitcheck {

// In counter::SpecialKind's order (core/counter_hash.h), which the draws return.
enum class SpecialValue {
  none,
  nan,
  positive_infinity,
  negative_infinity,
  subnormal,
  negative_zero
};
std::string to_string(SpecialValue kind);

// The rate `--special-values` and `"special_values": true` mean: one element in 32.
constexpr double default_special_value_rate = 1.0 / 32.0;
constexpr double max_special_value_rate = 0.5;
// The rate as case ids and reports write it: "0.03125".
std::string special_value_rate_string(double rate);
// NaN and +-Inf go only into one logical row in this many (chosen by seed and row, the same for
// every tensor of the case); the other rows get subnormals and -0 only. A NaN anywhere in a row
// poisons every output a reduction over that row feeds, so most rows must stay finite for the
// invariance check (and the controls' drift) to stay visible on wide rows.
constexpr std::int64_t nonfinite_row_period = counter::nonfinite_row_period;

struct SpecialElement {
  SpecialValue kind = SpecialValue::none;
  std::uint32_t bits = 0;  // raw storage bits in the dtype (meaningless when kind is none)
};

// The special value of element (row, column) of the tensor `name_hash` names, or kind none when the
// element keeps its generated value. `dtype` is a floating dtype (bf16, fp16, fp32).
SpecialElement special_value_at(DType dtype, std::uint64_t seed, std::uint64_t name_hash,
                                std::int64_t row, std::int64_t column, double rate);
bool row_allows_nonfinite(std::uint64_t seed, std::int64_t row);
// The bit layout of a floating dtype (bf16, fp16, fp32); throws for i32.
counter::FloatFormat float_format_of(DType dtype);

// What the raw bits of `dtype` hold: nan, an infinity, subnormal, negative_zero, or none (a normal
// number or +0).
SpecialValue classify_bits(DType dtype, std::uint32_t bits);

}  // namespace bitcheck
