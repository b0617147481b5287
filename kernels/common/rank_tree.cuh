// The fixed binary tree over the ranks' values that every fixed-order device sum uses: the same
// recursion as the CPU's fixed_tree (common/rank_sum.cpp), halves, left first, in fp32.
#pragma once

namespace bitcheck::cuda {

constexpr int max_tree_ranks = 8;

// (v0 + v1) + (v2 + v3) at 4 ranks, whatever the message, the batch or the element's position.
__device__ __forceinline__ float rank_tree(const float* values, int count) {
  float level[max_tree_ranks];
  for (int i = 0; i < count; ++i) level[i] = values[i];
  for (int width = count; width > 1; width /= 2) {
    for (int i = 0; i < width / 2; ++i) level[i] = level[2 * i] + level[2 * i + 1];
  }
  return level[0];
}

}  // namespace bitcheck::cuda
