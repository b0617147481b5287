// Special input values: selection by the counter-based hash and bit patterns per dtype
// (core/counter_hash.h, shared with the device generator), and their classification.
#include "core/special_values.h"

#include <cstdio>
#include <stdexcept>

#include "core/counter_hash.h"

namespace bitcheck {

using Format = counter::FloatFormat;

Format float_format_of(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {16, 8, 7};
    case DType::fp16:
      return {16, 5, 10};
    case DType::fp32:
      return {32, 8, 23};
    case DType::i32:
      break;
  }
  throw std::invalid_argument("special values exist only for floating dtypes, not " +
                              to_string(dtype));
}

std::string to_string(SpecialValue kind) {
  switch (kind) {
    case SpecialValue::none:
      return "none";
    case SpecialValue::nan:
      return "nan";
    case SpecialValue::positive_infinity:
      return "+inf";
    case SpecialValue::negative_infinity:
      return "-inf";
    case SpecialValue::subnormal:
      return "subnormal";
    case SpecialValue::negative_zero:
      return "-0";
  }
  return "unknown";
}

std::string special_value_rate_string(double rate) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", rate);
  return buffer;
}

bool row_allows_nonfinite(std::uint64_t seed, std::int64_t row) {
  return counter::row_allows_nonfinite(seed, row);
}

SpecialElement special_value_at(DType dtype, std::uint64_t seed, std::uint64_t name_hash,
                                std::int64_t row, std::int64_t column, double rate) {
  if (rate <= 0.0) return {};
  const counter::SpecialDraw draw =
      counter::special_at(float_format_of(dtype), seed, name_hash, row, column, rate);
  return {static_cast<SpecialValue>(draw.kind), draw.bits};
}

SpecialValue classify_bits(DType dtype, std::uint32_t bits) {
  const Format f = float_format_of(dtype);
  const std::uint32_t exponent = bits & f.exponent(), mantissa = bits & f.mantissa();
  if (exponent == f.exponent()) {
    if (mantissa != 0) return SpecialValue::nan;
    return (bits & f.sign()) ? SpecialValue::negative_infinity : SpecialValue::positive_infinity;
  }
  if (exponent != 0) return SpecialValue::none;
  if (mantissa != 0) return SpecialValue::subnormal;
  return (bits & f.sign()) ? SpecialValue::negative_zero : SpecialValue::none;
}

}  // namespace bitcheck
