// The rank-sum orders of the CPU backend's simulated collectives.
#include "common/rank_sum.h"

#include <algorithm>
#include <stdexcept>

namespace bitcheck {
namespace {

// values[order[0]] + values[order[1]] + ..., rounded to the dtype after each addition.
float chain(const std::vector<float>& values, DType dtype, std::size_t start) {
  const std::size_t ranks = values.size();
  float sum = values[start % ranks];
  for (std::size_t step = 1; step < ranks; ++step)
    sum = round_to(dtype, sum + values[(start + step) % ranks]);
  return sum;
}

float tree(const float* values, int count) {
  if (count == 1) return values[0];
  const int half = count / 2;
  return tree(values, half) + tree(values + half, count - half);
}

}  // namespace

std::string to_string(RankSum sum) {
  switch (sum) {
    case RankSum::ring:
      return "ring";
    case RankSum::rank_chain:
      return "rank chain";
    case RankSum::fixed_tree:
      return "fixed tree";
    case RankSum::rotating_chain:
      return "rotating chain";
  }
  return "";
}

float sum_ranks(RankSum sum, const std::vector<float>& values, DType dtype, std::int64_t element,
                std::int64_t message_elements) {
  const auto ranks = static_cast<std::int64_t>(values.size());
  if (ranks == 0) throw std::invalid_argument("sum_ranks: no ranks");
  switch (sum) {
    case RankSum::ring: {
      const std::int64_t chunk = element * ranks / std::max<std::int64_t>(1, message_elements);
      return chain(values, dtype, static_cast<std::size_t>((chunk + 1) % ranks));
    }
    case RankSum::rank_chain:
      return chain(values, dtype, 0);
    case RankSum::fixed_tree:
      return round_to(dtype, tree(values.data(), static_cast<int>(ranks)));
    case RankSum::rotating_chain:
      return chain(
          values, dtype,
          static_cast<std::size_t>(rotating_start(message_elements, static_cast<int>(ranks))));
  }
  throw std::logic_error("sum_ranks: unknown order");
}

float fixed_tree(const float* leaves, int count) {
  return tree(leaves, count);
}

int rotating_start(std::int64_t message_elements, int ranks) {
  const std::uint64_t hashed = static_cast<std::uint64_t>(message_elements) * 0x9E3779B97F4A7C15ull;
  return static_cast<int>((hashed >> 32) % static_cast<std::uint64_t>(ranks));
}

std::pair<int, int> rank_leaves(int count, int tp, int rank) {
  const int per_rank = count / tp;
  return {rank * per_rank, (rank + 1) * per_rank};
}

}  // namespace bitcheck
