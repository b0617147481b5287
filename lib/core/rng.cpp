// Counter-based generator: splitmix64 finalizers over the (seed, name, row, column) key.
#include "core/rng.h"

namespace bitcheck {
namespace {
std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

std::uint64_t key_hash(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                       std::int64_t column) {
  std::uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ name_hash);
  h = mix64(h ^ static_cast<std::uint64_t>(row));
  return mix64(h ^ (static_cast<std::uint64_t>(column) * 0x9e3779b97f4a7c15ull));
}
}  // namespace

std::uint64_t hash_name(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

float counter_uniform(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                      std::int64_t column) {
  std::uint64_t bits = key_hash(seed, name_hash, row, column) >> 40;  // 24 bits
  return static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f;
}

std::uint64_t counter_bits(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                           std::int64_t column) {
  return key_hash(seed, name_hash, row, column);
}

std::uint64_t counter_index(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                            std::int64_t column, std::uint64_t bound) {
  return key_hash(seed, name_hash, row, column) % bound;
}

std::uint64_t LayoutRandom::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return mix64(state_);
}

std::int64_t LayoutRandom::uniform_int(std::int64_t low, std::int64_t high_inclusive) {
  auto span = static_cast<std::uint64_t>(high_inclusive - low + 1);
  return low + static_cast<std::int64_t>(next() % span);
}

}  // namespace bitcheck
