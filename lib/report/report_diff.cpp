// Case-by-case comparison of two reports.
#include "report/report_diff.h"

#include <map>
#include <set>
#include <sstream>

#include "core/verdict.h"

namespace bitcheck {
namespace {

bool failing(const nlohmann::json& c) {
  auto verdict = parse_verdict(c.at("verdict").get<std::string>()).value_or(Verdict::error);
  if (c.value("control", false)) return false;
  return is_failure(verdict);
}

bool control_drifted(const nlohmann::json& c) {
  std::string verdict = c.at("verdict").get<std::string>();
  return verdict == "drift" || verdict == "nondeterministic";
}

// A control's group, as the sweep's control check counts them: op/impl/dtype/pass of the case
// id, and its tp when above 1 (the id's last part "tp=P").
std::string control_group(const std::string& id) {
  std::string group;
  std::size_t at = 0;
  for (int part = 0; part < 4 && at != std::string::npos; ++part) {
    const std::size_t end = id.find('/', at);
    group += (part ? "/" : "") + id.substr(at, end == std::string::npos ? end : end - at);
    at = end == std::string::npos ? end : end + 1;
  }
  const std::size_t last = id.rfind('/');
  if (last != std::string::npos && id.compare(last + 1, 3, "tp=") == 0) group += id.substr(last);
  return group;
}

nlohmann::json entry(const std::string& id, const nlohmann::json* old_case,
                     const nlohmann::json* new_case) {
  nlohmann::json j = {{"id", id}};
  if (old_case) j["old"] = (*old_case)["verdict"];
  if (new_case) j["new"] = (*new_case)["verdict"];
  return j;
}

}  // namespace

ReportDiff diff_reports(const nlohmann::json& old_report, const nlohmann::json& new_report) {
  std::map<std::string, const nlohmann::json*> old_cases, new_cases;
  for (const auto& c : old_report.at("results")) old_cases[c.at("id").get<std::string>()] = &c;
  for (const auto& c : new_report.at("results")) new_cases[c.at("id").get<std::string>()] = &c;
  ReportDiff diff;
  nlohmann::json& d = diff.document;
  for (const char* key :
       {"newly_failing", "newly_skipped", "fixed", "still_failing", "verdict_changes",
        "fingerprint_changed", "controls_lost_drift", "controls_lost_drift_by_chance",
        "control_groups_lost_drift", "controls_regained_drift", "added", "removed"}) {
    d[key] = nlohmann::json::array();
  }
  // Control groups whose drift is left to chance (a case nondeterministic in either report:
  // atomics): one of their cases holding still on one night is not a regression, unless the whole
  // group holds. Groups that drifted before and have no drifting case now.
  std::set<std::string> noisy, drifted_before, drifting_now;
  for (const auto* cases : {&old_cases, &new_cases}) {
    for (const auto& [id, c] : *cases) {
      if (!c->value("control", false)) continue;
      if ((*c)["verdict"] == "nondeterministic") noisy.insert(control_group(id));
      if (control_drifted(*c))
        (cases == &old_cases ? drifted_before : drifting_now).insert(control_group(id));
    }
  }
  std::set<std::string> groups_in_new;
  for (const auto& [id, c] : new_cases) {
    if (c->value("control", false) && (*c)["verdict"] != "skipped")
      groups_in_new.insert(control_group(id));
  }
  for (const std::string& group : drifted_before) {
    if (groups_in_new.count(group) && !drifting_now.count(group))
      d["control_groups_lost_drift"].push_back({{"id", group}});
  }
  for (const auto& [id, new_case] : new_cases) {
    auto found = old_cases.find(id);
    if (found == old_cases.end()) {
      d["added"].push_back(entry(id, nullptr, new_case));
      continue;
    }
    const nlohmann::json* old_case = found->second;
    const std::string old_verdict = (*old_case)["verdict"], new_verdict = (*new_case)["verdict"];
    if (new_case->value("control", false)) {
      if (control_drifted(*old_case) && !control_drifted(*new_case) && new_verdict != "skipped") {
        d[noisy.count(control_group(id)) ? "controls_lost_drift_by_chance" : "controls_lost_drift"]
            .push_back(entry(id, old_case, new_case));
      } else if (!control_drifted(*old_case) && control_drifted(*new_case)) {
        d["controls_regained_drift"].push_back(entry(id, old_case, new_case));
      }
    } else if (!failing(*old_case) && failing(*new_case)) {
      d["newly_failing"].push_back(entry(id, old_case, new_case));
    } else if (failing(*old_case) && !failing(*new_case)) {
      d["fixed"].push_back(entry(id, old_case, new_case));
    } else if (failing(*old_case) && failing(*new_case)) {
      d["still_failing"].push_back(entry(id, old_case, new_case));
    }
    // A case checked before and skipped now (a device out of memory, a lost GPU): its sight is
    // lost, whatever its verdict was, a control's too.
    if (old_verdict != "skipped" && new_verdict == "skipped") {
      nlohmann::json j = entry(id, old_case, new_case);
      if (new_case->contains("reason")) j["reason"] = (*new_case)["reason"];
      d["newly_skipped"].push_back(j);
    }
    if (old_verdict != new_verdict) d["verdict_changes"].push_back(entry(id, old_case, new_case));
    if (old_case->contains("fingerprint") && new_case->contains("fingerprint") &&
        (*old_case)["fingerprint"] != (*new_case)["fingerprint"]) {
      nlohmann::json j = entry(id, old_case, new_case);
      j["old_fingerprint"] = (*old_case)["fingerprint"];
      j["new_fingerprint"] = (*new_case)["fingerprint"];
      d["fingerprint_changed"].push_back(j);
    }
  }
  for (const auto& [id, old_case] : old_cases) {
    if (!new_cases.count(id)) d["removed"].push_back(entry(id, old_case, nullptr));
  }
  diff.regression = !d["newly_failing"].empty() || !d["newly_skipped"].empty() ||
                    !d["controls_lost_drift"].empty() || !d["control_groups_lost_drift"].empty();
  d["regression"] = diff.regression;
  for (const char* side : {"old", "new"}) {
    const auto& report = std::string(side) == "old" ? old_report : new_report;
    d["meta"][side] = {
        {"git_revision", report["meta"].value("git_revision", "")},
        {"started_at", report["meta"].value("started_at", "")},
        {"gpu",
         report["meta"].contains("cuda") ? report["meta"]["cuda"].value("gpu_name", "") : ""}};
  }
  return diff;
}

std::string render_diff(const ReportDiff& diff) {
  std::ostringstream out;
  const auto& d = diff.document;
  const char* labels[][2] = {{"newly_failing", "newly failing"},
                             {"newly_skipped", "newly skipped (checked before, not now)"},
                             {"fixed", "fixed"},
                             {"still_failing", "still failing"},
                             {"controls_lost_drift", "controls that lost their drift"},
                             {"control_groups_lost_drift", "control groups that lost their drift"},
                             {"controls_lost_drift_by_chance",
                              "control cases of nondeterministic groups that held this time (the "
                              "group still drifts: not a regression)"},
                             {"controls_regained_drift", "controls drifting again"},
                             {"fingerprint_changed", "fingerprint changed"},
                             {"verdict_changes", "verdict changes"},
                             {"added", "added cases"},
                             {"removed", "removed cases"}};
  for (const auto& label : labels) {
    const auto& list = d[label[0]];
    out << label[1] << ": " << list.size() << "\n";
    std::size_t shown = 0;
    for (const auto& e : list) {
      if (++shown > 20) {
        out << "  ... " << (list.size() - 20) << " more (see --json)\n";
        break;
      }
      out << "  " << e["id"].get<std::string>();
      if (e.contains("old") && e.contains("new"))
        out << "  " << e["old"].get<std::string>() << " -> " << e["new"].get<std::string>();
      out << "\n";
    }
  }
  out << (diff.regression ? "REGRESSION\n" : "no regression\n");
  return out.str();
}

}  // namespace bitcheck
