// The tiles of the tensor-core attention backward (host code of the CUDA backend): 64-row tiles
// and the 128-row pairs of the sm_90 kernels at head dim 128 each cover every token once, start
// at multiples of their size within one sequence, and come longest-running first in both orders.
// Built only with the CUDA backend.
#include <catch2/catch.hpp>

#ifdef BITCHECK_HAVE_CUDA
#include <stdexcept>
#include <vector>

#include "attention/attention_kernels.h"

namespace cuda = bitcheck::cuda;

TEST_CASE("attention backward tiles cover every token once, in both orders", "[attention]") {
  const std::vector<int> lengths = {1, 63, 64, 65, 128, 129, 200, 700};
  std::vector<int> first_slots;
  int slots = 3;  // the first sequence need not start at slot 0
  for (int length : lengths) {
    first_slots.push_back(slots);
    slots += length + 5;  // pad slots between sequences
  }
  for (int rows : {cuda::attention_mma_backward_tile, cuda::attention_backward_pair_tile}) {
    const cuda::AttentionBackwardTileLists tiles =
        cuda::attention_backward_tiles(first_slots, lengths, rows);
    REQUIRE(tiles.queries.size() == tiles.keys.size());
    for (const auto* list : {&tiles.queries, &tiles.keys}) {
      std::vector<int> covered(static_cast<std::size_t>(slots), 0);
      for (const cuda::AttentionBackwardTile& tile : *list) {
        CHECK(tile.start_position % rows == 0);
        CHECK(tile.count >= 1);
        CHECK(tile.count <= rows);
        CHECK(tile.first_slot == tile.sequence_slot + tile.start_position);
        CHECK(tile.start_position + tile.count <= tile.sequence_length);
        for (int i = 0; i < tile.count; ++i)
          ++covered[static_cast<std::size_t>(tile.first_slot + i)];
      }
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        for (int p = 0; p < lengths[s]; ++p)
          CHECK(covered[static_cast<std::size_t>(first_slots[s] + p)] == 1);
      }
      int total = 0;
      for (int c : covered) total += c;
      int tokens = 0;
      for (int length : lengths) tokens += length;
      CHECK(total == tokens);  // pad slots belong to no tile
    }
    for (std::size_t i = 1; i < tiles.queries.size(); ++i) {
      CHECK(tiles.queries[i - 1].start_position >= tiles.queries[i].start_position);
      const auto& a = tiles.keys[i - 1];
      const auto& b = tiles.keys[i];
      CHECK(a.sequence_length - a.start_position >= b.sequence_length - b.start_position);
    }
  }
  // The 700-token sequence: 11 tiles of 64 rows, 6 pairs (the last one 60 rows).
  CHECK(cuda::attention_backward_tiles({0}, {700}, 64).queries.size() == 11);
  const auto pairs = cuda::attention_backward_tiles({0}, {700}, 128);
  REQUIRE(pairs.queries.size() == 6);
  CHECK(pairs.queries.front().start_position == 640);
  CHECK(pairs.queries.front().count == 60);
  CHECK_THROWS_AS(cuda::attention_backward_tiles({0, 10}, {5}, 64), std::invalid_argument);
}

TEST_CASE("attention backward tile rows follow the kernel and head dim", "[attention]") {
  using Kernel = cuda::AttentionBackwardKernel;
  CHECK(cuda::attention_backward_tile_rows(Kernel::wgmma, 128) == 128);
  CHECK(cuda::attention_backward_tile_rows(Kernel::wgmma, 64) == 64);
  CHECK(cuda::attention_backward_tile_rows(Kernel::mma_sync, 128) == 64);
  CHECK(cuda::attention_backward_tile_rows(Kernel::mma_sync, 64) == 64);
}
#endif
