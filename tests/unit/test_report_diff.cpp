// diff_reports on reports built in the test: a control case that held is a regression unless its
// group's drift is left to chance (a case nondeterministic in either report); a group that held
// entirely is a regression either way; groups are op/impl/dtype/pass and tp.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/report_diff.h"

using bitcheck::diff_reports;
using nlohmann::json;

namespace {

json report_of(const std::vector<std::pair<std::string, std::string>>& controls) {
  json results = json::array();
  for (const auto& [id, verdict] : controls)
    results.push_back({{"id", id}, {"verdict", verdict}, {"control", true}});
  results.push_back({{"id", "matmul/fixed-order/bf16/forward/K=64,N=64/M=3/seed=1"},
                     {"verdict", "pass"},
                     {"control", false}});
  return {{"meta", json::object()}, {"results", results}};
}

std::vector<std::string> ids(const json& list) {
  std::vector<std::string> out;
  for (const auto& e : list) out.push_back(e["id"].get<std::string>());
  return out;
}

const std::string atomic_a = "attention/atomic-dq/bf16/backward/D=64/M=4/seed=1";
const std::string atomic_b = "attention/atomic-dq/bf16/backward/D=128/M=1/seed=1";
const std::string split_a = "matmul/split-k/bf16/forward/K=64,N=64/M=3/seed=1";
const std::string split_b = "matmul/split-k/bf16/forward/K=64,N=64/M=7/seed=1";

}  // namespace

TEST_CASE("diff: a deterministic control case that held is a regression", "[diff]") {
  const auto diff = diff_reports(report_of({{split_a, "drift"}, {split_b, "drift"}}),
                                 report_of({{split_a, "pass"}, {split_b, "drift"}}));
  CHECK(diff.regression);
  CHECK(ids(diff.document["controls_lost_drift"]) == std::vector<std::string>{split_a});
  CHECK(diff.document["controls_lost_drift_by_chance"].empty());
  CHECK(diff.document["control_groups_lost_drift"].empty());  // split_b still drifts
}

TEST_CASE("diff: a case of a nondeterministic control group that held is no regression", "[diff]") {
  // Nondeterministic in the old report only, then in the new one only: either makes it chance.
  for (const bool noisy_before : {true, false}) {
    INFO("nondeterministic " << (noisy_before ? "before" : "now"));
    const auto diff = diff_reports(
        report_of({{atomic_a, "drift"}, {atomic_b, noisy_before ? "nondeterministic" : "drift"}}),
        report_of({{atomic_a, "pass"}, {atomic_b, noisy_before ? "drift" : "nondeterministic"}}));
    CHECK_FALSE(diff.regression);
    CHECK(diff.document["controls_lost_drift"].empty());
    CHECK(ids(diff.document["controls_lost_drift_by_chance"]) ==
          std::vector<std::string>{atomic_a});
  }
}

TEST_CASE("diff: a control group with no drifting case left is a regression, noisy or not",
          "[diff]") {
  const auto diff = diff_reports(report_of({{atomic_a, "drift"}, {atomic_b, "nondeterministic"}}),
                                 report_of({{atomic_a, "pass"}, {atomic_b, "pass"}}));
  CHECK(diff.regression);
  CHECK(ids(diff.document["control_groups_lost_drift"]) ==
        std::vector<std::string>{"attention/atomic-dq/bf16/backward"});
}

TEST_CASE("diff: control groups are split by dtype, pass and tp", "[diff]") {
  // The bf16 group held while the fp32 one still drifts: the bf16 group is lost. At tp = 2 the
  // same impl is a group of its own.
  const std::string fp32 = "attention/atomic-dq/fp32/backward/D=64/M=4/seed=1";
  const std::string at_tp2 = atomic_a + "/tp=2";
  const auto diff =
      diff_reports(report_of({{atomic_a, "nondeterministic"}, {fp32, "drift"}, {at_tp2, "drift"}}),
                   report_of({{atomic_a, "pass"}, {fp32, "drift"}, {at_tp2, "pass"}}));
  CHECK(diff.regression);
  CHECK(ids(diff.document["control_groups_lost_drift"]) ==
        std::vector<std::string>{"attention/atomic-dq/bf16/backward",
                                 "attention/atomic-dq/bf16/backward/tp=2"});
}

TEST_CASE("diff: a control group the new report skips entirely is not counted as held", "[diff]") {
  const auto diff = diff_reports(report_of({{split_a, "drift"}, {split_b, "drift"}}),
                                 report_of({{split_a, "skipped"}, {split_b, "skipped"}}));
  CHECK(diff.document["control_groups_lost_drift"].empty());
  CHECK(diff.document["controls_lost_drift"].empty());
}

TEST_CASE("diff: a case checked before and skipped now is a regression, with its reason",
          "[diff]") {
  // The 16 shards of a nightly once ran the GPU out of memory and skipped hundreds of passing
  // cases: every other list stayed empty.
  json before = report_of({{split_a, "drift"}, {split_b, "drift"}});
  json after = report_of({{split_a, "skipped"}, {split_b, "drift"}});
  after["results"].back()["verdict"] = "skipped";  // the invariant case
  after["results"].back()["reason"] = "needs ~0.0 GiB of device memory, 0.4 GiB free";
  const auto diff = diff_reports(before, after);
  CHECK(diff.regression);
  CHECK(ids(diff.document["newly_skipped"]) ==
        std::vector<std::string>{"matmul/fixed-order/bf16/forward/K=64,N=64/M=3/seed=1", split_a});
  CHECK(diff.document["newly_skipped"][0]["reason"] ==
        "needs ~0.0 GiB of device memory, 0.4 GiB free");
  CHECK(diff.document["newly_failing"].empty());
  CHECK(diff.document["controls_lost_drift"].empty());
  // Skipped in both: no change, no regression.
  const auto again = diff_reports(after, after);
  CHECK_FALSE(again.regression);
  CHECK(again.document["newly_skipped"].empty());
}
