// Element types of the contract (bf16, fp16, fp32) plus int32 for index tensors:
// round-to-nearest-even conversions, raw bit access and ULP distance. Everything bitwise in
// bitcheck goes through here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace bitcheck {

enum class DType { bf16, fp16, fp32, i32 };

std::string to_string(DType dtype);
std::optional<DType> parse_dtype(const std::string& name);
std::size_t dtype_size(DType dtype);
bool is_floating(DType dtype);
int dtype_mantissa_bits(DType dtype);  // explicit fraction bits: bf16 7, fp16 10, fp32 23

std::uint32_t float_bits(float value);
float float_from_bits(std::uint32_t bits);

// Round-to-nearest-even; NaN stays NaN (quiet, payload's top bits kept), overflow goes to +-Inf.
std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(std::uint16_t bits);

// Rounds a float to the nearest value representable in `dtype` (identity for fp32).
float round_to(DType dtype, float value);
// Raw storage bits of `value` rounded to `dtype` (zero-extended to 32 bits).
std::uint32_t encode_bits(DType dtype, float value);
float decode_bits(DType dtype, std::uint32_t bits);
// Hex string of raw bits with the dtype's width, e.g. "0x3f80" for bf16 1.0.
std::string hex_bits(DType dtype, std::uint32_t bits);

// Number of representable values between a and b (given as raw bits of `dtype`), through zero;
// +0 and -0 are 0 apart. Infinite (UINT64_MAX) when either is NaN and the other is not.
std::uint64_t ulp_distance(DType dtype, std::uint32_t a_bits, std::uint32_t b_bits);

}  // namespace bitcheck
