// Counter-based input generator: a value is a pure function of (seed, tensor name, logical row,
// column), so a logical row holds the same values in every layout it is presented in.
#pragma once
#include <cstdint>
#include <string>

namespace bitcheck {

std::uint64_t hash_name(const std::string& name);  // FNV-1a, stable across platforms

// Uniform in [-1, 1) with 24 random bits: exactly representable in fp32.
float counter_uniform(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                      std::int64_t column);
// All 64 bits of the key's hash, for generators that need several independent draws.
std::uint64_t counter_bits(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                           std::int64_t column);
// Uniform integer in [0, bound).
std::uint64_t counter_index(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                            std::int64_t column, std::uint64_t bound);

// Small sequential generator for layout choices (positions, permutations, lengths).
class LayoutRandom {
 public:
  explicit LayoutRandom(std::uint64_t seed) : state_(seed ^ 0x6a09e667f3bcc908ull) {}
  std::uint64_t next();
  std::int64_t uniform_int(std::int64_t low, std::int64_t high_inclusive);

 private:
  std::uint64_t state_;
};

}  // namespace bitcheck
