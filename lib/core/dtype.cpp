// dtype conversions: round-to-nearest-even float -> bf16/fp16 and back, bit access, ULP distance.
#include "core/dtype.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace bitcheck {

std::string to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::fp32:
      return "fp32";
    case DType::i32:
      return "i32";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::fp16;
  if (name == "fp32") return DType::fp32;
  if (name == "i32") return DType::i32;
  return std::nullopt;
}

std::size_t dtype_size(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::fp16 ? 2 : 4;
}

bool is_floating(DType dtype) {
  return dtype != DType::i32;
}

int dtype_mantissa_bits(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 7;
    case DType::fp16:
      return 10;
    default:
      return 23;
  }
}

std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload bits, force quiet
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. Carries into the
  // exponent give the correctly rounded next binade or +-Inf.
  std::uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return float_from_bits(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_fp16_bits(float value) {
  std::uint32_t bits = float_bits(value);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, keep the top 9 payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x01ffu));
  }
  if (magnitude >= 0x477ff000u) {  // >= 65520 rounds to Inf (65504 is the largest finite)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {  // below 2^-14: fp16 subnormal or zero
    if (magnitude < 0x33000000u)
      return static_cast<std::uint16_t>(sign);  // < 2^-25 -> 0 (ties too)
    // Value = mantissa_with_hidden * 2^(exp-150); fp16 subnormal unit is 2^-24.
    std::uint32_t exponent = magnitude >> 23;
    std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    std::uint32_t shift = 126u - exponent;  // shift mantissa (2^23 scaled) to units of 2^-24
    std::uint32_t result = mantissa >> shift;
    std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  // Normal: rebias exponent (127 -> 15) and round 23 -> 10 fraction bits, ties to even.
  std::uint32_t rebased = magnitude - 0x38000000u;  // subtract (127-15) << 23
  std::uint32_t lsb = (rebased >> 13) & 1u;
  rebased += 0x0fffu + lsb;
  return static_cast<std::uint16_t>(sign | (rebased >> 13));
}

float fp16_bits_to_float(std::uint16_t bits) {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // exact
    return sign ? -magnitude : magnitude;
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(value));
    case DType::fp16:
      return fp16_bits_to_float(float_to_fp16_bits(value));
    default:
      return value;
  }
}

std::uint32_t encode_bits(DType dtype, float value) {
  switch (dtype) {
    case DType::bf16:
      return float_to_bf16_bits(value);
    case DType::fp16:
      return float_to_fp16_bits(value);
    case DType::i32:
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(value));
    default:
      return float_bits(value);
  }
}

float decode_bits(DType dtype, std::uint32_t bits) {
  switch (dtype) {
    case DType::bf16:
      return bf16_bits_to_float(static_cast<std::uint16_t>(bits));
    case DType::fp16:
      return fp16_bits_to_float(static_cast<std::uint16_t>(bits));
    case DType::i32:
      return static_cast<float>(static_cast<std::int32_t>(bits));
    default:
      return float_from_bits(bits);
  }
}

std::string hex_bits(DType dtype, std::uint32_t bits) {
  char buffer[16];
  if (dtype_size(dtype) == 2) {
    std::snprintf(buffer, sizeof buffer, "0x%04x", bits & 0xffffu);
  } else {
    std::snprintf(buffer, sizeof buffer, "0x%08x", bits);
  }
  return buffer;
}

namespace {
// Maps raw bits to a line where adjacent representable values are adjacent integers and
// -0 and +0 coincide.
std::int64_t ordered_index(DType dtype, std::uint32_t bits) {
  int width = static_cast<int>(dtype_size(dtype)) * 8;
  std::uint32_t sign_mask = 1u << (width - 1);
  std::int64_t magnitude = static_cast<std::int64_t>(bits & (sign_mask - 1u));
  return (bits & sign_mask) ? -magnitude : magnitude;
}

bool is_nan_bits(DType dtype, std::uint32_t bits) {
  return std::isnan(decode_bits(dtype, bits));
}
}  // namespace

std::uint64_t ulp_distance(DType dtype, std::uint32_t a_bits, std::uint32_t b_bits) {
  if (dtype == DType::i32) {
    auto a = static_cast<std::int64_t>(static_cast<std::int32_t>(a_bits));
    auto b = static_cast<std::int64_t>(static_cast<std::int32_t>(b_bits));
    return static_cast<std::uint64_t>(a > b ? a - b : b - a);
  }
  bool a_nan = is_nan_bits(dtype, a_bits), b_nan = is_nan_bits(dtype, b_bits);
  if (a_nan || b_nan) return a_nan && b_nan ? 0 : std::numeric_limits<std::uint64_t>::max();
  std::int64_t difference = ordered_index(dtype, a_bits) - ordered_index(dtype, b_bits);
  return static_cast<std::uint64_t>(difference < 0 ? -difference : difference);
}

}  // namespace bitcheck
