// Shared helpers for CPU token reductions (dW, dweight): visiting the real (non-pad) slots of an
// invocation in order, and a reduction tree whose shape depends on the token count (a control).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/op.h"

namespace bitcheck {

// Real slots of the batch, in slot order (which is token order in every in-order layout).
std::vector<std::int64_t> real_slots(const Batch& batch);

// Sums per-token contributions into `accumulator` (length `width`) with a tree whose leaves hold
// ceil(slots / 4) slots each: the tree changes with the number of slots (pads included), which is
// exactly the failure of a kernel that sizes its reduction from the padded token count.
void tree_reduce_by_slot_count(
    const Batch& batch, std::int64_t width, std::vector<float>& accumulator,
    const std::function<void(std::int64_t slot, std::vector<float>& sum)>& add_token);

}  // namespace bitcheck
