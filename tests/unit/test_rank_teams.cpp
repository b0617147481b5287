// How a sweep's cases at tp > 1 are shared out over groups of rank processes (plan_rank_teams):
// by group size, largest first, as many groups of a size side by side as the devices hold.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sweep/rank_group.h"

using namespace bitcheck;

namespace {

std::vector<CaseSpec> cases_at(const std::vector<int>& tps) {
  std::vector<CaseSpec> cases;
  for (std::size_t i = 0; i < tps.size(); ++i) {
    CaseSpec c;
    c.op = "all_reduce";
    c.impl = "fixed-order";
    c.rows = static_cast<std::int64_t>(i + 1);
    c.tp = tps[i];
    cases.push_back(c);
  }
  return cases;
}

std::vector<std::int64_t> rows_of(const RankTeam& team) {
  std::vector<std::int64_t> rows;
  for (const auto& c : team.cases) rows.push_back(c.rows);
  return rows;
}

}  // namespace

TEST_CASE("rank teams: on 4 devices tp 4 first on one group, then tp 2 dealt to two groups",
          "[unit][tp]") {
  SweepOptions options;
  const auto phases =
      plan_rank_teams(options, cases_at({2, 4, 2, 2, 4, 2, 2}), {"0", "1", "2", "3"}, 4);
  REQUIRE(phases.size() == 2);
  REQUIRE(phases[0].size() == 1);
  CHECK(phases[0][0].group_size == 4);
  CHECK(phases[0][0].devices == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(rows_of(phases[0][0]) == std::vector<std::int64_t>{2, 5});
  REQUIRE(phases[1].size() == 2);
  CHECK(phases[1][0].devices == std::vector<std::string>{"0", "1"});
  CHECK(phases[1][1].devices == std::vector<std::string>{"2", "3"});
  CHECK(rows_of(phases[1][0]) == std::vector<std::int64_t>{1, 4, 7});
  CHECK(rows_of(phases[1][1]) == std::vector<std::int64_t>{3, 6});
}

TEST_CASE("rank teams: a tp above the devices goes to a group of all of them, and no team idles",
          "[unit][tp]") {
  SweepOptions options;
  // 3 devices, largest tp 4: size 3. The tp 4 and tp 8 cases on the group of 3 (its ranks skip
  // them), the tp 2 case on one group of 2 (a single case: no second team).
  const auto phases = plan_rank_teams(options, cases_at({4, 2, 8}), {"a", "b", "c"}, 3);
  REQUIRE(phases.size() == 2);
  REQUIRE(phases[0].size() == 1);
  CHECK(phases[0][0].group_size == 3);
  CHECK(rows_of(phases[0][0]) == std::vector<std::int64_t>{1, 3});
  REQUIRE(phases[1].size() == 1);
  CHECK(phases[1][0].devices == std::vector<std::string>{"a", "b"});
  CHECK(rows_of(phases[1][0]) == std::vector<std::int64_t>{2});
}

TEST_CASE("rank teams: under srun and when timing, one group of the largest size", "[unit][tp]") {
  for (const bool srun : {true, false}) {
    SweepOptions options;
    if (srun) {
      options.rank_launcher = "srun";
    } else {
      options.rank_bench = true;
    }
    const auto phases =
        plan_rank_teams(options, cases_at({2, 4, 2}), {"0", "1", "2", "3", "4", "5"}, 4);
    REQUIRE(phases.size() == 1);
    REQUIRE(phases[0].size() == 1);
    CHECK(phases[0][0].devices == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(rows_of(phases[0][0]) == std::vector<std::int64_t>{1, 2, 3});
  }
}
