// Special input values: selection by the counter-based hash, bit patterns per dtype.
#include "core/special_values.h"

#include <cstdio>
#include <stdexcept>

#include "core/rng.h"

namespace bitcheck {
namespace {

// Keys of the special-value draws, disjoint from the uniform draws of the same tensor.
const std::uint64_t selection_salt = hash_name("special_values/selection");
const std::uint64_t nonfinite_rows_key = hash_name("special_values/nonfinite_rows");

struct Format {
  int width, exponent_bits, mantissa_bits;
  std::uint32_t sign() const { return 1u << (width - 1); }
  std::uint32_t exponent() const { return ((1u << exponent_bits) - 1u) << mantissa_bits; }
  std::uint32_t mantissa() const { return (1u << mantissa_bits) - 1u; }
  std::uint32_t quiet() const { return 1u << (mantissa_bits - 1); }
};

Format format_of(DType dtype) {
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

// Four distinct NaNs: the canonical quiet NaN, a quiet NaN with a low payload bit, a negative quiet
// NaN with another payload, and a signaling NaN. Kernels that copy or select values keep payloads,
// so invariance (which compares bits) sees whether every layout takes the same path.
std::uint32_t nan_bits(const Format& f, std::uint64_t variant) {
  switch (variant % 4) {
    case 0:
      return f.exponent() | f.quiet();
    case 1:
      return f.exponent() | f.quiet() | 1u;
    case 2:
      return f.sign() | f.exponent() | f.quiet() | 2u;
    default:
      return f.exponent() | 1u;
  }
}

// A subnormal of either sign, mantissa uniform in [1, 2^mantissa_bits - 1]: the smallest and the
// largest subnormal included.
std::uint32_t subnormal_bits(const Format& f, std::uint64_t variant) {
  std::uint32_t mantissa = 1u + static_cast<std::uint32_t>((variant >> 1) % f.mantissa());
  return ((variant & 1u) ? f.sign() : 0u) | mantissa;
}

}  // namespace

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
  return counter_bits(seed, nonfinite_rows_key, row, 0) % nonfinite_row_period == 0;
}

SpecialElement special_value_at(DType dtype, std::uint64_t seed, std::uint64_t name_hash,
                                std::int64_t row, std::int64_t column, double rate) {
  if (rate <= 0.0) return {};
  const std::uint64_t draw = counter_bits(seed, name_hash ^ selection_salt, row, column);
  // The top 32 bits select the element; the next 3 pick one of 8 slots; the rest pick the variant.
  const double selector = static_cast<double>(draw >> 32) * (1.0 / 4294967296.0);
  if (selector >= rate) return {};
  const Format f = format_of(dtype);
  unsigned slot = static_cast<unsigned>((draw >> 29) & 7u);
  const std::uint64_t variant = draw & ((1u << 29) - 1u);
  // Slots 0-4 are non-finite: in a finite-only row they fall back to a subnormal or -0.
  if (slot <= 4 && !row_allows_nonfinite(seed, row)) slot = (slot % 2 == 0) ? 5 : 7;
  switch (slot) {
    case 0:
    case 1:
    case 2:
      return {SpecialValue::nan, nan_bits(f, variant)};
    case 3:
      return {SpecialValue::positive_infinity, f.exponent()};
    case 4:
      return {SpecialValue::negative_infinity, f.sign() | f.exponent()};
    case 5:
    case 6:
      return {SpecialValue::subnormal, subnormal_bits(f, variant)};
    default:
      return {SpecialValue::negative_zero, f.sign()};
  }
}

SpecialValue classify_bits(DType dtype, std::uint32_t bits) {
  const Format f = format_of(dtype);
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
