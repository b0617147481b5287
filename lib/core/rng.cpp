// Counter-based generator: splitmix64 finalizers over the (seed, name, row, column) key
// (core/counter_hash.h, shared with the device generator).
#include "core/rng.h"

#include "core/counter_hash.h"

namespace bitcheck {

std::uint64_t hash_name(const std::string& name) {
  return counter::fnv1a(reinterpret_cast<const unsigned char*>(name.data()), name.size(),
                        counter::fnv_offset);
}

float counter_uniform(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                      std::int64_t column) {
  return counter::uniform_of(counter::key_hash(seed, name_hash, row, column));
}

std::uint64_t counter_bits(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                           std::int64_t column) {
  return counter::key_hash(seed, name_hash, row, column);
}

std::uint64_t counter_index(std::uint64_t seed, std::uint64_t name_hash, std::int64_t row,
                            std::int64_t column, std::uint64_t bound) {
  return counter::key_hash(seed, name_hash, row, column) % bound;
}

std::uint64_t LayoutRandom::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return counter::mix64(state_);
}

std::int64_t LayoutRandom::uniform_int(std::int64_t low, std::int64_t high_inclusive) {
  auto span = static_cast<std::uint64_t>(high_inclusive - low + 1);
  return low + static_cast<std::int64_t>(next() % span);
}

}  // namespace bitcheck
