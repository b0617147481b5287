// Launch paths: declarations and families, nested recordings, switch points and the batches a
// spec takes from them, and the coverage table of a report (ran, crossed, drifted, gaps).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "core/path_members.h"
#include "core/paths.h"
#include "report/coverage.h"
#include "spec/spec.h"

using namespace bitcheck;
using nlohmann::json;

TEST_CASE("a family matches its members only", "[paths]") {
  PathDecl bucket = PathDecl("bucket", "pinned buckets").as_family();
  CHECK(bucket.matches("bucket:1-8"));
  CHECK_FALSE(bucket.matches("bucket"));
  CHECK_FALSE(bucket.matches("buckets:1-8"));
  PathDecl tile("tile.X-as-A.128x256", "a tile");
  CHECK(tile.matches("tile.X-as-A.128x256"));
  CHECK_FALSE(tile.matches("tile.X-as-A.128x2560"));
}

TEST_CASE("recordings nest and nothing is recorded outside one", "[paths]") {
  record_path("lost");  // no recording: a no-op
  PathRecording outer;
  record_path("a");
  {
    PathRecording inner;
    record_path("b");
    record_path_member("bucket", "1-8");
    CHECK(inner.paths() == std::set<std::string>{"b", "bucket:1-8"});
  }
  record_path("c");
  CHECK(outer.paths() == std::set<std::string>{"a", "c"});
}

TEST_CASE("switch points are where the path of M differs from M - 1", "[paths]") {
  auto points = switch_points_of(
      [](std::int64_t m) { return std::string(m < 4    ? "small"
                                              : m < 10 ? "mid"
                                                       : "large"); }, 20);
  REQUIRE(points.size() == 2);
  CHECK(points[0].rows == 4);
  CHECK(points[0].from == "small");
  CHECK(points[0].to == "mid");
  CHECK(points[1].rows == 10);
  CHECK(points[1].to == "large");
}

TEST_CASE("switch-point batches: new paths first, then new moves, within the budget",
          "[paths][spec]") {
  std::vector<SwitchPoint> a = {{5, "x", "y"}, {9, "y", "x"}, {13, "x", "y"}, {20, "y", "z"}};
  std::vector<SwitchPoint> b = {{100, "p", "q"}};
  // Budget 7: 1; a reaches y at 5 (4, 5) and b reaches q at 100 (99, 100); a reaches z at 20
  // (19, 20) before any repeated move.
  CHECK(switch_point_batches({a, b}, 7) == std::vector<std::int64_t>{1, 4, 5, 19, 20, 99, 100});
  // A point comes with both its sides or not at all: a budget of 2 has no room for one, 3 for the
  // first new path.
  CHECK(switch_point_batches({a, b}, 2) == std::vector<std::int64_t>{1});
  CHECK(switch_point_batches({a, b}, 3) == std::vector<std::int64_t>{1, 4, 5});
  // A point whose left side is 1 needs one more value.
  CHECK(switch_point_batches({{{2, "p", "q"}}}, 2) == std::vector<std::int64_t>{1, 2});
  CHECK(switch_point_batches({}, 8) == std::vector<std::int64_t>{1});
}

namespace {
json case_entry(const std::string& impl, bool control, const json& paths, const json& drift) {
  return {{"id", "op/" + impl + "/case"},
          {"op", "op"},
          {"impl", impl},
          {"backend", "cpu"},
          {"control", control},
          {"verdict", drift.empty() ? "pass" : "drift"},
          {"layouts_run", json::array({"alone", "batch", "padded"})},
          {"paths", paths},
          {"drift", drift}};
}
}  // namespace

TEST_CASE("coverage counts runs, safe crossings, drifted crossings and gaps", "[paths]") {
  const json declared = json::array({path_decl_to_json(PathDecl("body", "b")),
                                     path_decl_to_json(PathDecl("tail", "t")),
                                     path_decl_to_json(PathDecl("never", "n"))});
  json report = {{"paths_declared", {{"op/good", declared}, {"op/control", declared}}},
                 {"results", json::array()}};
  // good: alone ran body+tail, batch body only, padded body+tail: batch crossed, bits held.
  report["results"].push_back(
      case_entry("good", false,
                 {{"alone", {"body", "tail"}}, {"batch", {"body"}}, {"padded", {"body", "tail"}}},
                 json::array()));
  // good again, with an undeclared path recorded.
  report["results"].push_back(case_entry(
      "good", false, {{"alone", {"body"}}, {"batch", {"body", "odd"}}, {"padded", {"body"}}},
      json::array()));
  // control: the batch crossed and drifted.
  report["results"].push_back(
      case_entry("control", true,
                 {{"alone", {"body", "tail"}}, {"batch", {"body"}}, {"padded", {"body", "tail"}}},
                 json::array({{{"layout", "batch"}}})));
  const Coverage coverage = compute_coverage(report);
  REQUIRE(coverage.impls.size() == 2);
  const ImplCoverage& good = coverage.impls[0];
  CHECK(good.invariant);
  CHECK(good.cases_ran == 2);
  CHECK(good.paths[0].cases_ran == 2);      // body
  CHECK(good.paths[1].cases_ran == 1);      // tail
  CHECK(good.paths[1].cases_crossed == 1);  // batch vs alone
  CHECK(good.paths[0].cases_crossed == 0);  // body ran on both sides
  CHECK(good.paths[2].cases_ran == 0);
  CHECK(good.undeclared.at("odd") == 1);
  const ImplCoverage& control = coverage.impls[1];
  CHECK_FALSE(control.invariant);
  CHECK(control.paths[1].crossings_drifted == 1);
  CHECK(control.paths[1].cases_crossed == 0);
  const auto gaps = coverage_gaps(coverage);
  REQUIRE(gaps.size() == 2);  // never ran, and the undeclared one (the control is not judged)
  CHECK(gaps[0] == "op/good: path never never ran");
  CHECK(gaps[1] == "op/good: recorded an undeclared path odd in 1 case(s)");
  CHECK(never_crossed(coverage) == std::vector<std::string>{"op/good: body"});
}

TEST_CASE(
    "a component's paths are re-recorded as members of the caller's family, its own as they are",
    "[paths]") {
  const PathDecl nccl = PathDecl("nccl", "NCCL's choice").as_family();
  const PathDecl gemm = PathDecl("gemm", "the GEMM's paths").as_family();
  PathRecording outer;
  {
    PathsAsMembers members("gemm", {PathDecl("split-sum", "summed across ranks"), nccl, gemm});
    record_path("split-sum");
    record_path("nccl:allreduce.ring.ll.ch1");
    record_path("tile.X-as-A.64x128");
    record_path("dw.token-sequential");
  }
  record_path("after");
  CHECK(outer.paths() == std::set<std::string>{"split-sum", "nccl:allreduce.ring.ll.ch1",
                                               "gemm:tile.X-as-A.64x128",
                                               "gemm:dw.token-sequential", "after"});
}
