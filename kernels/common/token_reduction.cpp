// CPU token-reduction helpers.
#include "common/token_reduction.h"

#include <algorithm>

namespace bitcheck {

std::vector<std::int64_t> real_slots(const Batch& batch) {
  std::vector<std::int64_t> slots;
  for (std::int64_t s = 0; s < batch.slots(); ++s) {
    if (!batch.is_pad(s)) slots.push_back(s);
  }
  return slots;
}

void tree_reduce_by_slot_count(
    const Batch& batch, std::int64_t width, std::vector<float>& accumulator,
    const std::function<void(std::int64_t, std::vector<float>&)>& add_token) {
  const std::int64_t slots = batch.slots();
  const std::int64_t leaf = std::max<std::int64_t>(1, (slots + 3) / 4);
  std::vector<std::vector<float>> partials;
  for (std::int64_t start = 0; start < slots; start += leaf) {
    std::vector<float> sum(static_cast<std::size_t>(width), 0.0f);
    for (std::int64_t s = start; s < std::min(slots, start + leaf); ++s) {
      if (!batch.is_pad(s)) add_token(s, sum);
    }
    partials.push_back(std::move(sum));
  }
  while (partials.size() > 1) {  // pairwise levels
    std::vector<std::vector<float>> next;
    for (std::size_t i = 0; i < partials.size(); i += 2) {
      if (i + 1 == partials.size()) {
        next.push_back(partials[i]);
        continue;
      }
      for (std::size_t c = 0; c < partials[i].size(); ++c) partials[i][c] += partials[i + 1][c];
      next.push_back(std::move(partials[i]));
    }
    partials = std::move(next);
  }
  if (partials.empty()) return;
  for (std::size_t c = 0; c < accumulator.size(); ++c) accumulator[c] += partials[0][c];
}

}  // namespace bitcheck
