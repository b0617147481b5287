// Token-id distributions: uniform (the counter_index draw), zipf (inverse CDF over a cumulative
// table of 1/k, ranks mapped to ids by a seeded bijection) and few (a handful of seeded ids).
#include "core/token_ids.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/rng.h"

namespace bitcheck {
namespace {

constexpr int rank_rounds = 3;
const std::uint64_t rank_permutation_key = hash_name("token_ids/rank_permutation");
const std::uint64_t few_ids_key = hash_name("token_ids/few");

// Cumulative Zipf weights, sum of 1/(j + 1) for j <= k, one table per vocabulary size for the
// process. Exponent 1 keeps every weight one IEEE division and every sum one addition (no libm
// call): the table, hence every id, is the same bits on every machine.
std::shared_ptr<const std::vector<double>> zipf_cumulative(std::uint64_t vocab) {
  static std::mutex mutex;
  static std::map<std::uint64_t, std::shared_ptr<const std::vector<double>>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto& table = tables[vocab];
  if (!table) {
    auto cumulative = std::make_shared<std::vector<double>>(static_cast<std::size_t>(vocab));
    double sum = 0;
    for (std::uint64_t k = 0; k < vocab; ++k) {
      sum += 1.0 / static_cast<double>(k + 1);
      (*cumulative)[static_cast<std::size_t>(k)] = sum;
    }
    table = cumulative;
  }
  return table;
}

// A double in [0, 1) from the top 53 bits.
double unit_interval(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

std::string to_string(IdDistribution distribution) {
  switch (distribution) {
    case IdDistribution::uniform:
      return "uniform";
    case IdDistribution::zipf:
      return "zipf";
    case IdDistribution::few:
      return "few";
  }
  return "unknown";
}

std::optional<IdDistribution> parse_id_distribution(const std::string& name) {
  for (IdDistribution distribution :
       {IdDistribution::uniform, IdDistribution::zipf, IdDistribution::few}) {
    if (name == to_string(distribution)) return distribution;
  }
  return std::nullopt;
}

std::string id_distribution_choices() {
  return "\"uniform\", \"zipf\" or \"few\"";
}

TokenIdSampler::TokenIdSampler(IdDistribution distribution, std::uint64_t seed, std::uint64_t vocab)
    : distribution_(distribution), seed_(seed), vocab_(std::max<std::uint64_t>(1, vocab)) {
  if (distribution_ == IdDistribution::zipf) {
    zipf_cumulative_ = zipf_cumulative(vocab_);
    unsigned bits = 0;
    while ((std::uint64_t(1) << bits) < vocab_) ++bits;
    rank_mask_ = (std::uint64_t(1) << bits) - 1;
    rank_shift_ = std::max(1u, (bits + 1) / 2);
    for (int round = 0; round < rank_rounds; ++round) {
      rank_keys_.push_back(counter_bits(seed_, rank_permutation_key, round, 0));
      rank_multipliers_.push_back(counter_bits(seed_, rank_permutation_key, round, 1) | 1);
    }
  }
  if (distribution_ == IdDistribution::few) {
    // One id in each of `count` equal parts of [0, vocab): distinct, and spread over the table.
    const std::uint64_t count = std::min(few_distinct_ids, vocab_);
    for (std::uint64_t part = 0; part < count; ++part) {
      const std::uint64_t first = part * vocab_ / count, end = (part + 1) * vocab_ / count;
      few_ids_.push_back(first +
                         counter_bits(seed_, few_ids_key, static_cast<std::int64_t>(part), 0) %
                             (end - first));
    }
  }
}

std::uint64_t TokenIdSampler::id_of_rank(std::uint64_t rank) const {
  // Each step is a bijection of [0, 2^bits) (xor, odd multiply and xorshift modulo 2^bits), so
  // walking the cycle from a value below vocab returns below vocab: a bijection of [0, vocab).
  std::uint64_t value = rank;
  do {
    for (std::size_t round = 0; round < rank_keys_.size(); ++round) {
      value = (value ^ rank_keys_[round]) & rank_mask_;
      value = (value * rank_multipliers_[round]) & rank_mask_;
      value ^= value >> rank_shift_;
    }
  } while (value >= vocab_);
  return value;
}

std::uint64_t TokenIdSampler::id(std::uint64_t name_hash, std::int64_t row,
                                 std::int64_t column) const {
  switch (distribution_) {
    case IdDistribution::uniform:
      return counter_index(seed_, name_hash, row, column, vocab_);
    case IdDistribution::zipf: {
      const std::vector<double>& cumulative = *zipf_cumulative_;
      const double target =
          unit_interval(counter_bits(seed_, name_hash, row, column)) * cumulative.back();
      const auto rank = static_cast<std::uint64_t>(
          std::upper_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin());
      return id_of_rank(std::min(rank, vocab_ - 1));
    }
    case IdDistribution::few:
      return few_ids_[counter_index(seed_, name_hash, row, column, few_ids_.size())];
  }
  return 0;
}

}  // namespace bitcheck
