// Library defaults are observations, not controls: whether cuBLASLt's heuristic drifts depends on
// the GPU, the shape and the library version, so its holding is reported, never a lost sight; a
// control (drifting by construction) that holds still is one.
#include <catch2/catch.hpp>

#include "core/op.h"
#include "report/matrix_render.h"
#include "report/summary.h"

using namespace bitcheck;

namespace {

CaseOutcome outcome(const std::string& impl, Verdict verdict, bool control, bool expected,
                    bool observation, const std::string& pass = "forward") {
  CaseOutcome o;
  o.id = "matmul/" + impl + "/bf16/" + pass + "/K=64,N=64/M=33/seed=1";
  o.op = "matmul";
  o.impl = impl;
  o.dtype = "bf16";
  o.pass = pass;
  o.verdict = verdict;
  o.control = control;
  o.expected_to_drift = expected;
  o.observation = observation;
  return o;
}

}  // namespace

TEST_CASE("a library default that holds is observed, not a harness failure", "[summary]") {
  const Summary summary =
      summarize({outcome("fixed-order", Verdict::pass, false, false, false),
                 outcome("cublaslt-heuristic", Verdict::pass, true, false, true),
                 outcome("cublaslt-heuristic", Verdict::pass, true, false, true, "backward"),
                 outcome("cublaslt-heuristic", Verdict::drift, true, false, true, "backward"),
                 outcome("split-k-by-rows", Verdict::drift, true, true, false)},
                {"matmul"});
  CHECK(summary.harness_failures.empty());
  CHECK(summary.exit_code == 0);
  REQUIRE(summary.observations.size() == 2);
  CHECK(summary.observations[0].pass == "backward");
  CHECK(summary.observations[0].cases == 2);
  CHECK(summary.observations[0].drifted == 1);
  CHECK(summary.observations[1].pass == "forward");
  CHECK(summary.observations[1].drifted == 0);
  REQUIRE(summary.controls.size() == 1);  // the observations are not control groups
  CHECK(summary.controls[0].impl == "split-k-by-rows");
}

TEST_CASE("a control expected to drift that holds is still a harness failure", "[summary]") {
  const Summary summary =
      summarize({outcome("split-k-by-rows", Verdict::pass, true, true, false)}, {"matmul"});
  REQUIRE(summary.harness_failures.size() == 1);
  CHECK_THAT(summary.harness_failures[0], Catch::Contains("lost its sight"));
  CHECK(summary.exit_code == 1);
  CHECK(summary.observations.empty());
}

namespace {
// A control case at `rows` whose first switch point lies at `needs_rows` (0: reached or none).
CaseOutcome control_case(std::int64_t rows, std::int64_t needs_rows, Verdict verdict) {
  CaseOutcome o = outcome("split-k-by-rows", verdict, true, true, false);
  o.rows = rows;
  o.drift_needs_rows = needs_rows;
  return o;
}
}  // namespace

TEST_CASE("a control no case of which reached its switch point had no chance: not lost sight",
          "[summary]") {
  const Summary none_reached =
      summarize({control_case(1, 4, Verdict::pass), control_case(3, 4, Verdict::pass)}, {"matmul"});
  CHECK(none_reached.harness_failures.empty());
  CHECK(none_reached.exit_code == 0);
  REQUIRE(none_reached.controls.size() == 1);
  CHECK(none_reached.controls[0].no_chance());
  CHECK_FALSE(none_reached.controls[0].lost_sight());
  REQUIRE(none_reached.controls_without_chance.size() == 1);
  CHECK(none_reached.controls_without_chance[0] ==
        "control matmul/split-k-by-rows bf16 forward had no chance to drift: its batches go up to "
        "3 rows and its path switches at 4 (add batch 4, or \"switch-points\", to the spec)");

  // One case that reached the switch and still held: the harness lost its sight.
  const Summary one_reached =
      summarize({control_case(3, 4, Verdict::pass), control_case(8, 0, Verdict::pass)}, {"matmul"});
  REQUIRE(one_reached.harness_failures.size() == 1);
  CHECK_THAT(one_reached.harness_failures[0],
             Catch::Contains("did not drift in any of its 1 cases that reached its switch point"));
  CHECK(one_reached.controls_without_chance.empty());
  CHECK(one_reached.exit_code == 1);

  // A drift anywhere in the group is what the control is for.
  const Summary drifted = summarize(
      {control_case(3, 4, Verdict::pass), control_case(8, 0, Verdict::drift)}, {"matmul"});
  CHECK(drifted.harness_failures.empty());
  CHECK(drifted.controls_without_chance.empty());
  CHECK(drifted.exit_code == 0);
}

namespace {
class NoOp : public Impl {
 public:
  using Impl::Impl;
  void run(Batch&) override {}
};
}  // namespace

TEST_CASE("impls: a library default is never expected to drift, a control is", "[summary]") {
  const NoOp library_default(
      ImplInfo::library_default("library-default", "cpu", "a library's default path"));
  const NoOp control(ImplInfo::control("control", "cpu", "a control"));
  const NoOp invariant(ImplInfo::invariant("invariant", "cpu", "an invariant impl"));
  CHECK_FALSE(library_default.expected_to_drift(Pass::forward));
  CHECK_FALSE(library_default.expected_to_drift(Pass::backward));
  CHECK_FALSE(library_default.claims_invariance());
  CHECK(control.expected_to_drift(Pass::forward));
  CHECK(control.expected_to_drift(Pass::backward));
  CHECK_FALSE(control.is_library_default());
  CHECK_FALSE(invariant.expected_to_drift(Pass::forward));
  CHECK_FALSE(invariant.expected_to_drift(Pass::backward));
}

TEST_CASE("impls: a backward-only failure model is expected to drift in the backward pass alone",
          "[summary]") {
  const NoOp tree(ImplInfo::control("dw-tree", "cpu", "a tree sized by the slots")
                      .drifting_in({Pass::backward}));
  CHECK_FALSE(tree.expected_to_drift(Pass::forward));
  CHECK(tree.expected_to_drift(Pass::backward));
}

TEST_CASE("the markdown matrix lists each library default: drifted cases and where", "[summary]") {
  auto observed = [](const std::string& id, std::int64_t rows, const std::string& verdict) {
    nlohmann::json c = {{"id", id},
                        {"op", "matmul"},
                        {"impl", "py:torch_defaults:linear"},
                        {"dtype", "bf16"},
                        {"pass", "forward"},
                        {"dims", {{"K", 4096}, {"N", 4096}}},
                        {"rows", rows},
                        {"verdict", verdict},
                        {"control", true},
                        {"observation", true},
                        {"drift", nlohmann::json::array()}};
    if (verdict == "drift") {
      c["drift"].push_back(
          {{"tensor", "y"}, {"layout", "batch"}, {"rows_differing", 8}, {"max_abs_diff", 0.5}});
      c["drift"].push_back(
          {{"tensor", "y"}, {"layout", "alone"}, {"rows_differing", 2}, {"max_abs_diff", 0.25}});
    }
    return c;
  };
  nlohmann::json report = {
      {"meta", nlohmann::json::object()},
      {"status_matrix", {{"dtypes", nlohmann::json::array()}, {"ops", nlohmann::json::array()}}},
      {"summary",
       {{"cases", 3},
        {"first_failing_op", nullptr},
        {"controls", nlohmann::json::array()},
        {"observations",
         {{{"op", "matmul"},
           {"impl", "py:torch_defaults:linear"},
           {"dtype", "bf16"},
           {"pass", "forward"},
           {"cases", 2},
           {"drifted", 1}},
          {{"op", "matmul"},
           {"impl", "cublaslt-heuristic"},
           {"dtype", "bf16"},
           {"pass", "forward"},
           {"cases", 1},
           {"drifted", 0}}}}}},
      {"results", {observed("a", 1, "pass"), observed("b", 257, "drift")}}};
  const std::string markdown = render_matrix_markdown(report);
  CHECK_THAT(markdown, Catch::Contains("## Library defaults (observed)"));
  CHECK_THAT(markdown,
             Catch::Contains("| matmul | py:torch_defaults:linear | bf16 | forward | 1 / 2 "
                             "| K=4096,N=4096 M=257: y in batch, 8 rows differ, max abs "
                             "diff 0.5 |"));
  CHECK_THAT(markdown,
             Catch::Contains("| matmul | cublaslt-heuristic | bf16 | forward | 0 / 1 | held |"));
  CHECK_THAT(markdown, !Catch::Contains("Failing cases of invariant impls"));
}
