// The tiles of the tensor-core attention backward (host code of the CUDA backend): 64-row tiles
// and the 128-row pairs of the sm_90 kernels at head dim 128 each cover every token once, start
// at multiples of their size within one sequence, and come longest-running first in both orders.
// Built only with the CUDA backend.
#include <catch2/catch.hpp>

#ifdef BITCHECK_HAVE_CUDA
#include <algorithm>
#include <cstdint>
#include <cstdlib>
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
namespace {
// Prefill tiles of 128 queries over sequences of `lengths`, in the launcher's order (longest
// first), each sequence's keys from its own cache base.
std::vector<cuda::AttentionTile> prefill_tiles(const std::vector<int>& lengths) {
  std::vector<cuda::AttentionTile> tiles;
  int slot = 0;
  for (int length : lengths) {
    for (int i = 0; i < length; i += 128)
      tiles.push_back({slot + i, std::min(128, length - i), i, slot});
    slot += length;
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) {
    return a.start_position + a.count > b.start_position + b.count;
  });
  return tiles;
}
}  // namespace

TEST_CASE("attention prefill order: every item once, L2 sections longest first", "[attention]") {
  const int heads = 32, kv_heads = 8, group = heads / kv_heads;
  const std::int64_t row_bytes = 2 * 128 * 2;  // K and V, head dim 128, bf16
  const std::vector<int> lengths = {8192, 8192, 8192, 8192};
  const std::vector<cuda::AttentionTile> tiles = prefill_tiles(lengths);
  REQUIRE(tiles.size() == 256);
  const auto is_permutation = [&](const std::vector<int>& order) {
    std::vector<int> seen(tiles.size() * heads, 0);
    for (int item : order) {
      REQUIRE(item >= 0);
      REQUIRE(item < static_cast<int>(seen.size()));
      ++seen[static_cast<std::size_t>(item)];
    }
    return order.size() == seen.size() &&
           std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; });
  };
  // No budget: the tiles in their order, each with its heads in order.
  const std::vector<int> plain =
      cuda::attention_prefill_order(tiles, heads, kv_heads, row_bytes, 0);
  REQUIRE(is_permutation(plain));
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(plain[i] == static_cast<int>(i));
  // 16 MiB: a (sequence, KV head) pair is 8192 rows of 512 bytes, 4 MiB, so a section holds four
  // pairs: one sequence's KV heads 0-3, then 4-7, then the next sequence's.
  const std::vector<int> order =
      cuda::attention_prefill_order(tiles, heads, kv_heads, row_bytes, std::int64_t{16} << 20);
  REQUIRE(is_permutation(order));
  const int per_section = 64 * 4 * group;  // 64 tiles, 4 KV heads of 4 heads each
  for (int section = 0; section < 8; ++section) {
    int last_end = 1 << 30;
    for (int i = section * per_section; i < (section + 1) * per_section; ++i) {
      const cuda::AttentionTile& tile = tiles[static_cast<std::size_t>(order[i] / heads)];
      const int kv_head = order[i] % heads / group;
      CHECK(tile.cache_base == 8192 * (section / 2));
      CHECK(kv_head / 4 == section % 2);
      CHECK(tile.start_position + tile.count <= last_end);  // longest first within a section
      last_end = tile.start_position + tile.count;
    }
  }
  // Varied lengths, a budget below one pair: one pair per section, sequences longest first.
  const std::vector<cuda::AttentionTile> varied = prefill_tiles({300, 1000, 5, 129});
  const std::vector<int> small = cuda::attention_prefill_order(varied, 4, 2, row_bytes, 1);
  std::vector<int> seen(varied.size() * 4, 0);
  for (int item : small) ++seen.at(static_cast<std::size_t>(item));
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  CHECK(varied[static_cast<std::size_t>(small.front() / 4)].cache_base ==
        300);  // the 1000-token one
  CHECK(varied[static_cast<std::size_t>(small.back() / 4)].cache_base == 1300);  // the 5-token one
  CHECK_THROWS_AS(cuda::attention_prefill_order(tiles, 30, 8, row_bytes, 0), std::invalid_argument);
  // The budget: 16 MiB unless BITCHECK_ATTENTION_L2_MIB says otherwise (a whole number of MiB).
  if (!std::getenv("BITCHECK_ATTENTION_L2_MIB")) CHECK(cuda::attention_l2_budget() == (16 << 20));
}
#endif
