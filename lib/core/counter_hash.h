// The counter-based generator's arithmetic as inline functions shared by host code and CUDA
// kernels (the device input generator), so a value drawn on the device has the host's bits.
#pragma once
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define BITCHECK_HOST_DEVICE __host__ __device__
#else
#define BITCHECK_HOST_DEVICE
#endif

namespace bitcheck::counter {

BITCHECK_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// splitmix64 finalizers over the (seed, name, row, column) key. The first three depend on the row
// alone: a generator filling a row computes row_hash once and column_hash per element.
BITCHECK_HOST_DEVICE inline std::uint64_t row_hash(std::uint64_t seed, std::uint64_t name_hash,
                                                   std::int64_t row) {
  std::uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ name_hash);
  return mix64(h ^ static_cast<std::uint64_t>(row));
}
BITCHECK_HOST_DEVICE inline std::uint64_t column_hash(std::uint64_t row_hash, std::int64_t column) {
  return mix64(row_hash ^ (static_cast<std::uint64_t>(column) * 0x9e3779b97f4a7c15ull));
}
BITCHECK_HOST_DEVICE inline std::uint64_t key_hash(std::uint64_t seed, std::uint64_t name_hash,
                                                   std::int64_t row, std::int64_t column) {
  return column_hash(row_hash(seed, name_hash, row), column);
}

// Uniform in [-1, 1) from the hash's top 24 bits: every step is exact in fp32.
BITCHECK_HOST_DEVICE inline float uniform_of(std::uint64_t hash) {
  return static_cast<float>(hash >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// The bits of a floating storage format (bf16, fp16, fp32).
struct FloatFormat {
  int width, exponent_bits, mantissa_bits;
  BITCHECK_HOST_DEVICE std::uint32_t sign() const { return 1u << (width - 1); }
  BITCHECK_HOST_DEVICE std::uint32_t exponent() const {
    return ((1u << exponent_bits) - 1u) << mantissa_bits;
  }
  BITCHECK_HOST_DEVICE std::uint32_t mantissa() const { return (1u << mantissa_bits) - 1u; }
  BITCHECK_HOST_DEVICE std::uint32_t quiet() const { return 1u << (mantissa_bits - 1); }
};

// Which special value a draw picks: SpecialKind's order is SpecialValue's (core/special_values.h).
enum class SpecialKind {
  none,
  nan,
  positive_infinity,
  negative_infinity,
  subnormal,
  negative_zero
};

struct SpecialDraw {
  SpecialKind kind = SpecialKind::none;
  std::uint32_t bits = 0;
};

// Four distinct NaNs: the canonical quiet NaN, a quiet NaN with a low payload bit, a negative quiet
// NaN with another payload, and a signaling NaN. Kernels that copy or select values keep payloads,
// so invariance (which compares bits) sees whether every layout takes the same path.
BITCHECK_HOST_DEVICE inline std::uint32_t nan_bits(const FloatFormat& f, std::uint64_t variant) {
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
BITCHECK_HOST_DEVICE inline std::uint32_t subnormal_bits(const FloatFormat& f,
                                                         std::uint64_t variant) {
  std::uint32_t mantissa = 1u + static_cast<std::uint32_t>((variant >> 1) % f.mantissa());
  return ((variant & 1u) ? f.sign() : 0u) | mantissa;
}

// The special value a selection draw gives at `rate`: the top 32 bits select the element, the
// next 3 pick one of 8 slots, the rest pick the variant. Slots 0-4 are non-finite: in a row that
// allows none they fall back to a subnormal or -0.
BITCHECK_HOST_DEVICE inline SpecialDraw special_of(const FloatFormat& f, std::uint64_t draw,
                                                   double rate, bool row_allows_nonfinite) {
  const double selector = static_cast<double>(draw >> 32) * (1.0 / 4294967296.0);
  if (selector >= rate) return {};
  unsigned slot = static_cast<unsigned>((draw >> 29) & 7u);
  const std::uint64_t variant = draw & ((1u << 29) - 1u);
  if (slot <= 4 && !row_allows_nonfinite) slot = (slot % 2 == 0) ? 5 : 7;
  switch (slot) {
    case 0:
    case 1:
    case 2:
      return {SpecialKind::nan, nan_bits(f, variant)};
    case 3:
      return {SpecialKind::positive_infinity, f.exponent()};
    case 4:
      return {SpecialKind::negative_infinity, f.sign() | f.exponent()};
    case 5:
    case 6:
      return {SpecialKind::subnormal, subnormal_bits(f, variant)};
    default:
      return {SpecialKind::negative_zero, f.sign()};
  }
}

// 64-bit FNV-1a over bytes, continued from `hash`: tensor names' hashes and output fingerprints.
constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ull;
constexpr std::uint64_t fnv_prime = 0x100000001b3ull;
BITCHECK_HOST_DEVICE inline std::uint64_t fnv1a(const unsigned char* bytes, std::size_t count,
                                                std::uint64_t hash) {
  for (std::size_t i = 0; i < count; ++i) {
    hash ^= bytes[i];
    hash *= fnv_prime;
  }
  return hash;
}
constexpr std::uint64_t name_hash_of(const char* name, std::uint64_t hash = fnv_offset) {
  return *name ? name_hash_of(name + 1, (hash ^ static_cast<unsigned char>(*name)) * fnv_prime)
               : hash;
}

// Keys of the special-value draws, disjoint from the uniform draws of the same tensor.
constexpr std::uint64_t special_selection_salt = name_hash_of("special_values/selection");
constexpr std::uint64_t nonfinite_rows_key = name_hash_of("special_values/nonfinite_rows");
// NaN and +-Inf go only into one logical row in this many (chosen by seed and row).
constexpr std::int64_t nonfinite_row_period = 4;

BITCHECK_HOST_DEVICE inline bool row_allows_nonfinite(std::uint64_t seed, std::int64_t row) {
  return key_hash(seed, nonfinite_rows_key, row, 0) % nonfinite_row_period == 0;
}

// The special value of element (row, column) of the tensor `name_hash` names at `rate`.
BITCHECK_HOST_DEVICE inline SpecialDraw special_at(const FloatFormat& f, std::uint64_t seed,
                                                   std::uint64_t name_hash, std::int64_t row,
                                                   std::int64_t column, double rate) {
  if (rate <= 0.0) return {};
  return special_of(f, key_hash(seed, name_hash ^ special_selection_salt, row, column), rate,
                    row_allows_nonfinite(seed, row));
}

}  // namespace bitcheck::counter
