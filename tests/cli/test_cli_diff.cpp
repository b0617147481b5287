// `bitcheck diff`: a planted regression exits 1 and is named, a planted fix exits 0 and is named,
// a changed fingerprint on a passing case is reported without failing, a control that stops
// drifting is a regression.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

json sweep_report(const TempDir& dir) {
  Run run = run_bitcheck(
      dir, "sweep --op matmul --backend cpu --batch 1,7 --dtype bf16 --no-progress --out " +
               quote(dir.path()));
  REQUIRE(run.exit_code == 0);
  return json::parse(read_file(dir / "report.json"));
}

json& first_case(json& report, bool control) {
  for (auto& c : report["results"]) {
    if (c["control"] == control && c["verdict"] == (control ? "drift" : "pass")) return c;
  }
  FAIL("no such case");
  return report;
}

void write(const std::string& path, const json& report) {
  std::ofstream(path) << report.dump();
}

}  // namespace

TEST_CASE("diff names a planted regression and exits 1, a planted fix and exits 0", "[cli][diff]") {
  TempDir dir;
  json base = sweep_report(dir);
  json broken = base;
  json& victim = first_case(broken, false);
  const std::string id = victim["id"];
  victim["verdict"] = "drift";
  write(dir / "old.json", base);
  write(dir / "new.json", broken);

  Run regression =
      run_bitcheck(dir, "diff " + quote(dir / "old.json") + " " + quote(dir / "new.json") +
                            " --json " + quote(dir / "d.json"));
  CHECK(regression.exit_code == 1);
  CHECK(regression.out.find("newly failing: 1") != std::string::npos);
  CHECK(regression.out.find(id) != std::string::npos);
  json document = json::parse(read_file(dir / "d.json"));
  CHECK(document["newly_failing"][0]["id"] == id);
  CHECK(document["regression"] == true);

  Run fix = run_bitcheck(dir, "diff " + quote(dir / "new.json") + " " + quote(dir / "old.json"));
  CHECK(fix.exit_code == 0);
  CHECK(fix.out.find("fixed: 1") != std::string::npos);
  CHECK(fix.out.find("no regression") != std::string::npos);
}

TEST_CASE("diff reports a changed fingerprint on a passing case without failing", "[cli][diff]") {
  TempDir dir;
  json base = sweep_report(dir);
  json changed = base;
  first_case(changed, false)["fingerprint"] = "0000000000000000";
  write(dir / "old.json", base);
  write(dir / "new.json", changed);
  Run run = run_bitcheck(dir, "diff " + quote(dir / "old.json") + " " + quote(dir / "new.json"));
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("fingerprint changed: 1") != std::string::npos);
}

TEST_CASE("diff treats a control that stopped drifting as a regression", "[cli][diff]") {
  TempDir dir;
  json base = sweep_report(dir);
  json blind = base;
  first_case(blind, true)["verdict"] = "pass";
  write(dir / "old.json", base);
  write(dir / "new.json", blind);
  Run run = run_bitcheck(dir, "diff " + quote(dir / "old.json") + " " + quote(dir / "new.json"));
  CHECK(run.exit_code == 1);
  CHECK(run.out.find("controls that lost their drift: 1") != std::string::npos);
}

TEST_CASE(
    "diff: a case of a nondeterministic control group that held is named but not a regression, "
    "the whole group holding is",
    "[cli][diff]") {
  TempDir dir;
  json base = sweep_report(dir);
  // Two drifting cases of one control group (op/impl/dtype/pass); the first nondeterministic in
  // the old report, as an atomics control's cases can be.
  std::map<std::string, std::vector<json*>> groups;
  for (auto& c : base["results"]) {
    if (c["control"] == true && c["verdict"] == "drift")
      groups[c["impl"].get<std::string>() + "/" + c["pass"].get<std::string>()].push_back(&c);
  }
  std::vector<json*> pair;
  for (auto& [group, cases] : groups)
    if (pair.empty() && cases.size() >= 2) pair = {cases[0], cases[1]};
  REQUIRE(pair.size() == 2);
  (*pair[0])["verdict"] = "nondeterministic";
  const std::string noisy = (*pair[0])["id"], held = (*pair[1])["id"];
  auto with_verdicts = [&](const std::string& first, const std::string& second) {
    json later = base;
    for (auto& c : later["results"]) {
      if (c["id"] == noisy) c["verdict"] = first;
      if (c["id"] == held) c["verdict"] = second;
    }
    return later;
  };
  write(dir / "old.json", base);
  write(dir / "one.json", with_verdicts("nondeterministic", "pass"));
  Run one = run_bitcheck(dir, "diff " + quote(dir / "old.json") + " " + quote(dir / "one.json") +
                                  " --json " + quote(dir / "one-diff.json"));
  INFO(one.out << one.err);
  CHECK(one.exit_code == 0);
  const json by_chance = json::parse(read_file(dir / "one-diff.json"));
  CHECK(by_chance["controls_lost_drift"].empty());
  REQUIRE(by_chance["controls_lost_drift_by_chance"].size() == 1);
  CHECK(by_chance["controls_lost_drift_by_chance"][0]["id"] == held);
  CHECK(by_chance["control_groups_lost_drift"].empty());
  // The whole group held: a regression, named by its group (op/impl/dtype/pass).
  const json& first = *pair[0];
  const std::string group =
      first["op"].get<std::string>() + "/" + first["impl"].get<std::string>() + "/" +
      first["dtype"].get<std::string>() + "/" + first["pass"].get<std::string>();
  json silent = base;
  for (auto& c : silent["results"]) {
    if (c["id"].get<std::string>().rfind(group + "/", 0) == 0) c["verdict"] = "pass";
  }
  write(dir / "none.json", silent);
  Run none = run_bitcheck(dir, "diff " + quote(dir / "old.json") + " " + quote(dir / "none.json") +
                                   " --json " + quote(dir / "none-diff.json"));
  INFO(none.out << none.err);
  CHECK(none.exit_code == 1);
  const json lost = json::parse(read_file(dir / "none-diff.json"));
  REQUIRE(lost["control_groups_lost_drift"].size() == 1);
  CHECK(lost["control_groups_lost_drift"][0]["id"] == group);
  CHECK(none.out.find("control groups that lost their drift: 1") != std::string::npos);
}

TEST_CASE("diff of a report that is not a report exits 2", "[cli][diff][bad-input]") {
  TempDir dir;
  std::ofstream(dir / "bad.json") << R"({"results": [{"id": 3}]})";
  Run run = run_bitcheck(dir, "diff " + quote(dir / "bad.json") + " " + quote(dir / "bad.json"));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("$.results[0].id") != std::string::npos);
}

TEST_CASE(
    "diff reads the compact form reports/ keeps: no change against the full report, a "
    "changed fingerprint and a control that stopped drifting are named",
    "[cli][diff]") {
  TempDir dir;
  json base = sweep_report(dir);
  Run compact =
      run_command(dir, "python3 " + quote(source_dir + "/scripts/compact-report.py") + " " +
                           quote(dir / "report.json") + " " + quote(dir / "compact.summary"));
  REQUIRE(compact.exit_code == 0);
  Run same =
      run_bitcheck(dir, "diff " + quote(dir / "compact.summary") + " " +
                            quote(dir / "report.json") + " --json " + quote(dir / "same.json"));
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  const json unchanged = json::parse(read_file(dir / "same.json"));
  for (const char* key : {"fingerprint_changed", "verdict_changes", "added", "removed"})
    CHECK(unchanged[key].empty());

  // The compact form as a later report: one passing case's fingerprint changed, one control's
  // drift gone.
  json later = json::parse(read_file(dir / "compact.summary"));
  std::string changed, control;
  for (auto& c : later["cases"]) {
    const std::string id = c[0];
    if (changed.empty() && c[1] == "pass" && id.find("/cpu-fixed-order/") != std::string::npos) {
      c[2] = "0000000000000000";
      changed = id;
    }
    if (control.empty() && c[1] == "drift") {
      c[1] = "pass";
      control = id;
    }
  }
  REQUIRE_FALSE(changed.empty());
  REQUIRE_FALSE(control.empty());
  write(dir / "later.summary", later);
  Run diff =
      run_bitcheck(dir, "diff " + quote(dir / "report.json") + " " + quote(dir / "later.summary") +
                            " --json " + quote(dir / "diff.json"));
  INFO(diff.out << diff.err);
  CHECK(diff.exit_code == 1);  // a control that lost its drift is a regression
  const json found = json::parse(read_file(dir / "diff.json"));
  REQUIRE(found["fingerprint_changed"].size() == 1);
  CHECK(found["fingerprint_changed"][0]["id"] == changed);
  REQUIRE(found["controls_lost_drift"].size() == 1);
  CHECK(found["controls_lost_drift"][0]["id"] == control);
}
