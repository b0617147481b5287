// Token-id distributions for the inputs that hold token ids (Generator::token_id: embedding ids,
// logprob targets, the chain's ids and targets). Like every generated value, a token's id is a pure
// function of (seed, tensor name, logical row, column): the same whatever batch it lands in.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

enum class IdDistribution {
  uniform,  // every id of [0, V) equally likely (few repeats when the batch is small against V)
  zipf,  // real text: frequency of the id of rank k proportional to 1/k, ranks seeded over [0, V)
  few,   // a handful of ids (few_distinct_ids) spread over [0, V): every id repeated many times
};
std::string to_string(IdDistribution distribution);
std::optional<IdDistribution> parse_id_distribution(const std::string& name);
// The accepted names, for error messages: "\"uniform\", \"zipf\" or \"few\"".
std::string id_distribution_choices();

constexpr std::uint64_t few_distinct_ids = 4;

// Draws the ids of one tensor of a case. Built once per tensor (the zipf table is shared by every
// sampler of the same vocabulary), then read from any thread.
class TokenIdSampler {
 public:
  TokenIdSampler(IdDistribution distribution, std::uint64_t seed, std::uint64_t vocab);
  // The id in [0, vocab) of element (row, column) of the tensor named by name_hash. Uniform is
  // counter_index(seed, name_hash, row, column, vocab), bit for bit.
  std::uint64_t id(std::uint64_t name_hash, std::int64_t row, std::int64_t column) const;
  // The id of frequency rank `rank` (0 = the most frequent) under zipf: a bijection of [0, vocab)
  // keyed by the seed, so the frequent ids are not the small numbers and every tensor of a case
  // (ids and targets) shares one ranking, as a text's inputs and next tokens do.
  std::uint64_t id_of_rank(std::uint64_t rank) const;

 private:
  IdDistribution distribution_;
  std::uint64_t seed_;
  std::uint64_t vocab_;
  // zipf's rank -> id bijection: rounds of (xor a key, multiply by an odd number, xorshift) on
  // [0, 2^bits), walked until the value falls below vocab.
  std::uint64_t rank_mask_ = 0;
  unsigned rank_shift_ = 1;
  std::vector<std::uint64_t> rank_keys_, rank_multipliers_;
  std::shared_ptr<const std::vector<double>> zipf_cumulative_;  // zipf: weights up to each rank
  std::vector<std::uint64_t> few_ids_;                          // few: the ids drawn from
};

}  // namespace bitcheck
