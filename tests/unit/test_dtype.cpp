// dtype conversions against known bit patterns: bf16/fp16 round-to-nearest-even (ties, subnormals,
// overflow, NaN, signed zeros), exhaustive 16-bit decode round trips, ULP distance and hex widths;
// a tensor reshaped without copying.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "core/dtype.h"
#include "core/tensor.h"

using namespace bitcheck;

namespace {

float from_bits(std::uint32_t bits) {
  return float_from_bits(bits);
}

std::uint16_t bf16(std::uint32_t float_bits_in) {
  return float_to_bf16_bits(from_bits(float_bits_in));
}
std::uint16_t fp16(float value) {
  return float_to_fp16_bits(value);
}

// Independent bf16 reference: pick the nearer of the two bf16 neighbours in double arithmetic,
// ties to the even one. Only for finite inputs.
std::uint16_t bf16_reference(float value) {
  std::uint32_t bits = float_bits(value);
  std::uint32_t low = bits & 0xffff0000u;
  std::uint32_t high = low + 0x10000u;  // next magnitude (may be Inf)
  double exact = std::fabs(static_cast<double>(value));
  double low_value = std::fabs(static_cast<double>(from_bits(low)));
  double high_value = (high & 0x7fffffffu) >= 0x7f800000u
                          ? std::ldexp(1.0, 128)
                          : std::fabs(static_cast<double>(from_bits(high)));
  double to_low = exact - low_value, to_high = high_value - exact;
  std::uint32_t chosen = to_low < to_high   ? low
                         : to_high < to_low ? high
                                            : (((low >> 16) & 1u) ? high : low);
  return static_cast<std::uint16_t>(chosen >> 16);
}

bool is_quiet_nan_bf16(std::uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x0040u) != 0;
}
bool is_quiet_nan_fp16(std::uint16_t bits) {
  return (bits & 0x7c00u) == 0x7c00u && (bits & 0x0200u) != 0;
}

}  // namespace

TEST_CASE("dtype names, sizes and mantissa widths", "[dtype]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32, DType::i32}) {
    REQUIRE(parse_dtype(to_string(dtype)) == dtype);
  }
  CHECK_FALSE(parse_dtype("fp64").has_value());
  CHECK_FALSE(parse_dtype("fp8").has_value());
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::fp16) == 2);
  CHECK(dtype_size(DType::fp32) == 4);
  CHECK(dtype_mantissa_bits(DType::bf16) == 7);
  CHECK(dtype_mantissa_bits(DType::fp16) == 10);
  CHECK(dtype_mantissa_bits(DType::fp32) == 23);
  CHECK_FALSE(is_floating(DType::i32));
}

TEST_CASE("bf16 rounds to nearest, ties to even", "[dtype][bf16]") {
  CHECK(bf16(0x3f800000u) == 0x3f80);  // 1.0 exact
  // Exact ties: 1 + 2^-8 lies halfway between 0x3f80 (even) and 0x3f81: stays at the even one.
  CHECK(bf16(0x3f808000u) == 0x3f80);
  // Halfway between 0x3f81 (odd) and 0x3f82 (even): goes up to the even one.
  CHECK(bf16(0x3f818000u) == 0x3f82);
  // Just below and just above a tie.
  CHECK(bf16(0x3f807fffu) == 0x3f80);
  CHECK(bf16(0x3f808001u) == 0x3f81);
  CHECK(bf16(0x3f817fffu) == 0x3f81);
  CHECK(bf16(0x3f818001u) == 0x3f82);
  // The same ties with the sign set round the magnitude the same way.
  CHECK(bf16(0xbf808000u) == 0xbf80);
  CHECK(bf16(0xbf818000u) == 0xbf82);
  CHECK(bf16(0xbf808001u) == 0xbf81);
  // A tie whose rounding carries into the next binade: 0x3fff8000 -> 2.0.
  CHECK(bf16(0x3fff8000u) == 0x4000);
}

TEST_CASE("bf16 subnormals, largest finite, overflow, zeros, infinities and NaN", "[dtype][bf16]") {
  SECTION("float subnormals") {
    CHECK(bf16(0x00000001u) == 0x0000);  // smallest float subnormal rounds to +0
    CHECK(bf16(0x80000001u) == 0x8000);  // and keeps its sign
    CHECK(bf16(0x00010000u) == 0x0001);  // exact bf16 subnormal
    CHECK(bf16(0x00008000u) == 0x0000);  // tie between 0 (even) and 0x0001
    CHECK(bf16(0x00008001u) == 0x0001);
    CHECK(bf16(0x00018000u) == 0x0002);  // tie between 0x0001 and 0x0002 (even)
    CHECK(bf16(0x807fffffu) == 0x8080);  // largest subnormal rounds up to -smallest normal
  }
  SECTION("largest finite and overflow") {
    CHECK(bf16(0x7f7f0000u) == 0x7f7f);
    CHECK(bf16(0x7f7f7fffu) == 0x7f7f);
    CHECK(bf16(0x7f7f8000u) == 0x7f80);  // tie above the largest finite (odd) goes to Inf
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
    CHECK(float_to_bf16_bits(-std::numeric_limits<float>::max()) == 0xff80);
    CHECK(bf16_bits_to_float(0x7f7f) == Approx(3.3895314e38f));
  }
  SECTION("zeros and infinities") {
    CHECK(float_to_bf16_bits(0.0f) == 0x0000);
    CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(float_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xff80);
  }
  SECTION("NaN stays a quiet NaN with its sign") {
    CHECK(bf16(0x7fc00000u) == 0x7fc0);
    CHECK(bf16(0xffc00000u) == 0xffc0);
    // A signalling NaN whose payload sits only in the low 16 bits must not truncate to Inf.
    std::uint16_t s = bf16(0x7f800001u);
    CHECK(is_quiet_nan_bf16(s));
    CHECK((s & 0x8000u) == 0);
    std::uint16_t negative = bf16(0xff800001u);
    CHECK(is_quiet_nan_bf16(negative));
    CHECK((negative & 0x8000u) != 0);
    // Top payload bits are kept.
    CHECK(bf16(0x7fa00000u) == 0x7fe0);
    CHECK(std::isnan(bf16_bits_to_float(s)));
  }
}

TEST_CASE("bf16 agrees with an independent nearest-even reference on sampled floats",
          "[dtype][bf16]") {
  std::uint64_t checked = 0;
  for (std::uint64_t bits = 0; bits < 0x7f800000u; bits += 0x3fffu) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      float value = from_bits(static_cast<std::uint32_t>(bits) | sign);
      INFO("float bits 0x" << std::hex << float_bits(value));
      std::uint16_t expected = bf16_reference(value);
      REQUIRE(float_to_bf16_bits(value) == expected);
      ++checked;
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("fp16 rounds to nearest, ties to even", "[dtype][fp16]") {
  CHECK(fp16(1.0f) == 0x3c00);
  CHECK(fp16(from_bits(0x3f801000u)) == 0x3c00);  // 1 + 2^-11: tie, stays even
  CHECK(fp16(from_bits(0x3f803000u)) == 0x3c02);  // 1 + 3*2^-11: tie, up to even
  CHECK(fp16(from_bits(0x3f800fffu)) == 0x3c00);  // just below a tie
  CHECK(fp16(from_bits(0x3f801001u)) == 0x3c01);  // just above a tie
  CHECK(fp16(from_bits(0x3f802fffu)) == 0x3c01);
  CHECK(fp16(from_bits(0x3f803001u)) == 0x3c02);
  CHECK(fp16(2049.0f) == 0x6800);  // spacing 2 above 2048: 2049 ties to 2048
  CHECK(fp16(2051.0f) == 0x6802);  // 2051 ties to 2052
  CHECK(fp16(-2049.0f) == 0xe800);
  CHECK(fp16(-2051.0f) == 0xe802);
}

TEST_CASE("fp16 largest finite, overflow, zeros, infinities and NaN", "[dtype][fp16]") {
  CHECK(fp16(65504.0f) == 0x7bff);
  CHECK(fp16(65519.0f) == 0x7bff);
  CHECK(fp16(from_bits(0x477fefffu)) == 0x7bff);  // just below the overflow tie
  CHECK(fp16(65520.0f) == 0x7c00);                // the tie above the largest finite: Inf
  CHECK(fp16(-65520.0f) == 0xfc00);
  CHECK(fp16(-65519.0f) == 0xfbff);
  CHECK(fp16(1e10f) == 0x7c00);
  CHECK(fp16(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(fp16(0.0f) == 0x0000);
  CHECK(fp16(-0.0f) == 0x8000);
  CHECK(fp16_bits_to_float(0x7bff) == 65504.0f);

  std::uint16_t quiet = fp16(from_bits(0x7fc00000u));
  CHECK(quiet == 0x7e00);
  std::uint16_t negative = fp16(from_bits(0xffc00000u));
  CHECK(negative == 0xfe00);
  std::uint16_t from_signalling = fp16(from_bits(0x7f800001u));  // payload below fp16's bits
  CHECK(is_quiet_nan_fp16(from_signalling));
  CHECK((from_signalling & 0x8000u) == 0);
  std::uint16_t negative_signalling = fp16(from_bits(0xff800001u));
  CHECK(is_quiet_nan_fp16(negative_signalling));
  CHECK((negative_signalling & 0x8000u) != 0);
}

TEST_CASE("fp16 subnormal results", "[dtype][fp16]") {
  const float unit = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  CHECK(fp16(unit) == 0x0001);
  CHECK(fp16(-unit) == 0x8001);
  CHECK(fp16(unit / 2) == 0x0000);  // tie between 0 (even) and 1 unit
  CHECK(fp16(-unit / 2) == 0x8000);
  CHECK(fp16(std::nextafter(unit / 2, 1.0f)) == 0x0001);  // just above that tie
  CHECK(fp16(std::nextafter(unit / 2, 0.0f)) == 0x0000);
  CHECK(fp16(unit * 1.5f) == 0x0002);  // tie between 1 and 2 units: even
  CHECK(fp16(unit * 2.5f) == 0x0002);  // tie between 2 and 3 units: even
  CHECK(fp16(unit * 1.25f) == 0x0001);
  CHECK(fp16(unit * 1023.0f) == 0x03ff);          // largest subnormal
  CHECK(fp16(unit * 1023.5f) == 0x0400);          // tie up to the smallest normal (even)
  CHECK(fp16(std::ldexp(1.0f, -14)) == 0x0400);   // smallest normal
  CHECK(fp16(from_bits(0x387fffffu)) == 0x0400);  // just below it rounds up into it
  CHECK(fp16(from_bits(0x00000001u)) == 0x0000);  // float subnormal -> +0
  CHECK(fp16(from_bits(0x80000001u)) == 0x8000);
  CHECK(fp16_bits_to_float(0x0001) == unit);
  CHECK(fp16_bits_to_float(0x03ff) == unit * 1023.0f);
}

TEST_CASE("every fp16 bit pattern decodes exactly and round-trips through float", "[dtype][fp16]") {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto pattern = static_cast<std::uint16_t>(bits);
    const float value = fp16_bits_to_float(pattern);
    const bool negative = (bits & 0x8000u) != 0;
    const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    INFO("fp16 bits 0x" << std::hex << bits);
    REQUIRE(std::signbit(value) == negative);
    if (exponent == 0x1f && mantissa != 0) {
      REQUIRE(std::isnan(value));
      std::uint16_t back = float_to_fp16_bits(value);
      REQUIRE(is_quiet_nan_fp16(back));
      REQUIRE(((back & 0x8000u) != 0) == negative);
      if (mantissa & 0x200u) REQUIRE(back == pattern);  // quiet NaNs keep their payload
      continue;
    }
    double magnitude = exponent == 0x1f ? std::numeric_limits<double>::infinity()
                       : exponent == 0  ? std::ldexp(static_cast<double>(mantissa), -24)
                                        : std::ldexp(static_cast<double>(1024 + mantissa),
                                                     static_cast<int>(exponent) - 25);
    REQUIRE(static_cast<double>(std::fabs(value)) == magnitude);
    REQUIRE(float_to_fp16_bits(value) == pattern);
    REQUIRE(encode_bits(DType::fp16, decode_bits(DType::fp16, bits)) == bits);
  }
}

TEST_CASE("every bf16 bit pattern decodes exactly and round-trips through float", "[dtype][bf16]") {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto pattern = static_cast<std::uint16_t>(bits);
    const float value = bf16_bits_to_float(pattern);
    INFO("bf16 bits 0x" << std::hex << bits);
    REQUIRE(float_bits(value) == bits << 16);
    if ((bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0) {
      std::uint16_t back = float_to_bf16_bits(value);
      REQUIRE(is_quiet_nan_bf16(back));
      REQUIRE((back & 0x8000u) == (bits & 0x8000u));
      continue;
    }
    REQUIRE(float_to_bf16_bits(value) == pattern);
  }
}

#if defined(__FLT16_MAX__)
TEST_CASE("fp16 agrees with the compiler's _Float16 conversion on sampled floats",
          "[dtype][fp16]") {
  std::uint64_t checked = 0;
  for (std::uint64_t bits = 0; bits < 0x7f800000u; bits += 0x1fffu) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      float value = from_bits(static_cast<std::uint32_t>(bits) | sign);
      _Float16 half = static_cast<_Float16>(value);
      std::uint16_t expected;
      std::memcpy(&expected, &half, sizeof expected);
      INFO("float bits 0x" << std::hex << float_bits(value));
      REQUIRE(float_to_fp16_bits(value) == expected);
      ++checked;
    }
  }
  CHECK(checked > 200000);
}
#endif

TEST_CASE("round_to and encode/decode go through the dtype's rounding", "[dtype]") {
  const float third = 1.0f / 3.0f;
  CHECK(round_to(DType::fp32, third) == third);
  CHECK(float_bits(round_to(DType::bf16, third)) == 0x3eab0000u);  // 0x3eaaaaab -> 0x3eab
  CHECK(encode_bits(DType::bf16, third) == 0x3eabu);
  CHECK(encode_bits(DType::fp16, third) == 0x3555u);
  CHECK(encode_bits(DType::fp32, third) == float_bits(third));
  CHECK(decode_bits(DType::fp16, 0x3555u) == round_to(DType::fp16, third));
  CHECK(encode_bits(DType::i32, -7.0f) == static_cast<std::uint32_t>(-7));
  CHECK(decode_bits(DType::i32, static_cast<std::uint32_t>(-7)) == -7.0f);

  Tensor tensor(DType::bf16, {2, 2});
  tensor.set(3, third);
  CHECK(tensor.bits(3) == 0x3eabu);
  CHECK(tensor.get(3) == round_to(DType::bf16, third));
  tensor.fill_nan();
  for (std::int64_t i = 0; i < tensor.numel(); ++i) CHECK(std::isnan(tensor.get(i)));
}

TEST_CASE("ULP distance counts representable values between two bit patterns", "[dtype][ulp]") {
  SECTION("adjacent values are 1 apart, in every dtype") {
    CHECK(ulp_distance(DType::bf16, 0x3f80, 0x3f81) == 1);
    CHECK(ulp_distance(DType::bf16, 0x3f81, 0x3f80) == 1);
    CHECK(ulp_distance(DType::fp16, 0x3c00, 0x3bff) == 1);  // across a binade boundary
    CHECK(ulp_distance(DType::fp32, float_bits(1.0f), float_bits(std::nextafter(1.0f, 2.0f))) == 1);
    CHECK(ulp_distance(DType::bf16, 0x7f7f, 0x7f80) == 1);  // largest finite to Inf
    CHECK(ulp_distance(DType::bf16, 0x3f80, 0x3f90) == 16);
  }
  SECTION("across zero counts both sides; +0 and -0 are 0 apart") {
    CHECK(ulp_distance(DType::bf16, 0x0001, 0x8001) == 2);
    CHECK(ulp_distance(DType::fp16, 0x0003, 0x8002) == 5);
    CHECK(ulp_distance(DType::fp32, 0x00000001u, 0x80000001u) == 2);
    CHECK(ulp_distance(DType::bf16, 0x0000, 0x8000) == 0);
    CHECK(ulp_distance(DType::fp16, 0x0000, 0x8000) == 0);
    CHECK(ulp_distance(DType::fp32, 0x00000000u, 0x80000000u) == 0);
    CHECK(ulp_distance(DType::fp16, 0x8000, 0x0001) == 1);
  }
  SECTION("NaN against a number is infinitely far") {
    const auto infinite = std::numeric_limits<std::uint64_t>::max();
    CHECK(ulp_distance(DType::bf16, 0x7fc0, 0x3f80) == infinite);
    CHECK(ulp_distance(DType::fp16, 0x3c00, 0x7e00) == infinite);
    CHECK(ulp_distance(DType::fp32, 0x7fc00000u, 0x00000000u) == infinite);
    CHECK(ulp_distance(DType::fp32, 0x7f800000u, 0x7fc00000u) == infinite);  // Inf vs NaN
  }
  SECTION("identical bits are 0 apart") {
    CHECK(ulp_distance(DType::bf16, 0x4049, 0x4049) == 0);
    CHECK(ulp_distance(DType::i32, 5u, static_cast<std::uint32_t>(-3)) == 8);
  }
}

TEST_CASE("hex_bits prints the dtype's storage width", "[dtype]") {
  CHECK(hex_bits(DType::bf16, 0x3f80) == "0x3f80");
  CHECK(hex_bits(DType::fp16, 0x0001) == "0x0001");
  CHECK(hex_bits(DType::bf16, 0x12345) == "0x2345");  // only the 16 storage bits
  CHECK(hex_bits(DType::fp32, float_bits(1.0f)) == "0x3f800000");
  CHECK(hex_bits(DType::fp32, 0) == "0x00000000");
  CHECK(hex_bits(DType::i32, 0xffffffffu) == "0xffffffff");
}

TEST_CASE("a tensor reshaped keeps its elements' bits and refuses another element count",
          "[dtype][tensor]") {
  Tensor tensor(DType::bf16, {3, 4});
  for (std::int64_t i = 0; i < tensor.numel(); ++i)
    tensor.set_bits(i, 0x3f80u + static_cast<std::uint32_t>(i));
  const Tensor original = tensor;
  tensor.reshape({1, 12});
  CHECK(tensor.shape() == std::vector<std::int64_t>{1, 12});
  CHECK(tensor.row_size() == 12);
  for (std::int64_t i = 0; i < tensor.numel(); ++i) CHECK(tensor.bits(i) == original.bits(i));
  tensor.reshape({3, 4});
  CHECK(tensor.bitwise_equal(original));
  CHECK_THROWS_AS(tensor.reshape({5, 2}), std::invalid_argument);
  CHECK(tensor.shape() == std::vector<std::int64_t>{3, 4});
}

TEST_CASE("large tensors are zeroed and poisoned whole on several threads", "[dtype][tensor]") {
  setenv("BITCHECK_HOST_THREADS", "3", 1);
  // 40 MiB of bf16 (parts of whole elements) and an odd element count of fp32.
  for (const auto& [dtype, count] : {std::pair{DType::bf16, std::int64_t{20} << 20},
                                     std::pair{DType::fp32, (std::int64_t{10} << 20) + 7}}) {
    Tensor poisoned = Tensor::poisoned(dtype, {count});
    const std::uint32_t nan_bits = poisoned.bits(0);
    CHECK(std::isnan(poisoned.get(0)));
    std::int64_t not_poison = 0;
    for (std::int64_t i = 0; i < count; ++i) not_poison += poisoned.bits(i) != nan_bits;
    CHECK(not_poison == 0);
    // A zeroed tensor where a freed poisoned one just was: every byte zero.
    poisoned = Tensor();
    const Tensor zeros(dtype, {count});
    std::int64_t not_zero = 0;
    for (std::int64_t i = 0; i < count; ++i) not_zero += zeros.bits(i) != 0;
    CHECK(not_zero == 0);
  }
  unsetenv("BITCHECK_HOST_THREADS");
}
