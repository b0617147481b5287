// `bitcheck diff OLD NEW`: what drifted, what got fixed, what still fails, every verdict change,
// and outputs whose fingerprint (hash of the canonical output bits) changed — the signal for drift
// across runs, GPUs and toolkit versions even when every case passes.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace bitcheck {

struct ReportDiff {
  nlohmann::json document;  // the categories, case ids and verdicts
  bool regression = false;  // a newly failing invariant case, or a control that lost its drift
};

ReportDiff diff_reports(const nlohmann::json& old_report, const nlohmann::json& new_report);
std::string render_diff(const ReportDiff& diff);

}  // namespace bitcheck
