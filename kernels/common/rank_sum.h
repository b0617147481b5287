// How the values of P ranks are summed, for the CPU backend's simulated ranks: each order models a
// transport, so every TP impl and control on the CPU has the reduction semantics of its GPU twin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace bitcheck {

enum class RankSum {
  // NCCL's ring all-reduce: the message of `message_elements` splits into P chunks, and the chunk
  // of element i is reduced around the ring from rank (chunk + 1) % P, rounded to the dtype after
  // each addition. Which order an element gets follows the message size: it moves with the batch.
  ring,
  // A chain in rank order, rounded to the dtype after each addition: NCCL's tree within one node
  // with its algorithm, protocol and channels pinned, fixed whatever the message size.
  rank_chain,
  // A balanced binary tree over the ranks in fp32, rounded to the dtype once (bitcheck's
  // fixed-order collective).
  fixed_tree,
  // A control: the chain starts at rotating_start(message_elements, P), a hash of the message
  // size, so its start moves with the batch.
  rotating_chain,
};

// The rotating chain's first rank: a multiplicative hash of the message size, so that messages of
// different sizes (M x H, whatever power of two H is) start at different ranks.
int rotating_start(std::int64_t message_elements, int ranks);

std::string to_string(RankSum sum);

// The sum of values[0..P) (one per rank) for element `element` of a message of `message_elements`,
// in `dtype` as `sum` orders and rounds it.
float sum_ranks(RankSum sum, const std::vector<float>& values, DType dtype, std::int64_t element,
                std::int64_t message_elements);

// The fixed-order reduction of a TP op: `leaves` (a power of two, the largest TP size) fp32
// partials summed pairwise in one binary tree. At P ranks each rank sums the subtree of its
// leaves and the collective finishes the same tree, so the result does not depend on P.
float fixed_tree(const float* leaves, int count);

// The leaf range [first, last) of `count` leaves that rank `rank` of `tp` holds.
std::pair<int, int> rank_leaves(int count, int tp, int rank);

}  // namespace bitcheck
