// The fixed-order GEMM's persistent tile schedule (kernels/matmul/tile_schedule.h): every big and
// tail tile runs exactly once, and no CTA carries more than the least possible maximum load.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "../../kernels/matmul/tile_schedule.h"

namespace {

using bitcheck::cuda::TileSchedule;

struct Coverage {
  std::vector<int> big_runs, tail_runs;
  int max_load = 0;  // in tail-tile units, a big tile counting tail_per_slot
};

Coverage cover(const TileSchedule& schedule) {
  Coverage coverage;
  coverage.big_runs.assign(static_cast<size_t>(schedule.big_tiles), 0);
  coverage.tail_runs.assign(static_cast<size_t>(schedule.tail_tiles), 0);
  for (int cta = 0; cta < schedule.grid; ++cta) {
    const int big = schedule.big_count(cta);
    for (int i = 0; i < big; ++i) ++coverage.big_runs.at(static_cast<size_t>(cta + i * schedule.grid));
    int tails = 0;
    for (int tile = schedule.tail_tile(cta, 0); tile >= 0; tile = schedule.tail_tile(cta, ++tails))
      ++coverage.tail_runs.at(static_cast<size_t>(tile));
    REQUIRE(tails == schedule.tail_count(cta));
    coverage.max_load = std::max(coverage.max_load, big * schedule.tail_per_slot + tails);
  }
  return coverage;
}

}  // namespace

TEST_CASE("tile schedule runs every tile once and balances the load", "[matmul][schedule]") {
  int schedules = 0;
  for (int grid : {1, 4, 7, 132}) {
    for (int big_tiles : {0, 1, 3, 128, 131, 132, 133, 256, 4008}) {
      for (int tail_tiles : {0, 1, 5, 32, 64, 131, 1002}) {
        for (int tail_per_slot : {1, 2, 3}) {
          if (big_tiles + tail_tiles == 0) continue;
          const int used_grid = std::min(grid, big_tiles + tail_tiles);
          const TileSchedule schedule{big_tiles, tail_tiles, used_grid, tail_per_slot};
          const Coverage coverage = cover(schedule);
          INFO("big " << big_tiles << " tail " << tail_tiles << " grid " << used_grid << " per slot "
                      << tail_per_slot);
          REQUIRE(std::all_of(coverage.big_runs.begin(), coverage.big_runs.end(),
                              [](int runs) { return runs == 1; }));
          REQUIRE(std::all_of(coverage.tail_runs.begin(), coverage.tail_runs.end(),
                              [](int runs) { return runs == 1; }));
          // Lower bounds: the busiest CTA of the big tiles alone, and the total spread evenly.
          const int waves = (big_tiles + used_grid - 1) / used_grid;
          const int total = big_tiles * tail_per_slot + tail_tiles;
          const int bound = std::max(waves * tail_per_slot, (total + used_grid - 1) / used_grid);
          CHECK(coverage.max_load == bound);
          ++schedules;
        }
      }
    }
  }
  CHECK(schedules > 700);
}

TEST_CASE("tile schedule fills the idle slots of the last wave first", "[matmul][schedule]") {
  // M = 1025 on N = 4096 with 128x256 tiles: 128 big tiles on 132 SMs, 32 tail tiles of 64x128.
  const TileSchedule schedule{128, 32, 132, 3};
  for (int cta = 128; cta < 132; ++cta) {
    CHECK(schedule.big_count(cta) == 0);
    CHECK(schedule.tail_count(cta) == 4);
  }
  int with_tail = 0;
  for (int cta = 0; cta < 128; ++cta) with_tail += schedule.tail_count(cta);
  CHECK(with_tail == 16);
}
