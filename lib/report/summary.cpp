// The typed summary of a run and its status matrix, from case outcomes; the exit code.
#include "report/summary.h"

#include <algorithm>
#include <map>
#include <set>

namespace bitcheck {
namespace {

std::vector<CaseOutcome> outcomes_of(const std::vector<CaseResult>& results) {
  std::vector<CaseOutcome> outcomes;
  for (const auto& r : results) outcomes.push_back(outcome_of(r));
  return outcomes;
}

std::int64_t count(const Summary& summary, Verdict verdict) {
  auto found = summary.verdicts.find(to_string(verdict));
  return found == summary.verdicts.end() ? 0 : found->second;
}

}  // namespace

CaseOutcome outcome_of(const CaseResult& r) {
  CaseOutcome outcome;
  outcome.id = r.spec.id();
  outcome.op = r.spec.op;
  outcome.impl = r.spec.impl;
  outcome.dtype = r.spec.dtype_name;
  outcome.pass = to_string(r.spec.pass);
  outcome.tp = r.spec.tp;
  outcome.verdict = r.verdict;
  outcome.control = r.is_control;
  outcome.expected_to_drift = r.expected_to_drift;
  outcome.observation = r.is_observation;
  outcome.rows = r.spec.rows;
  outcome.drift_needs_rows = r.drift_needs_rows;
  return outcome;
}

std::string matrix_row_name(const std::string& op, int tp) {
  return tp > 1 ? op + " tp=" + std::to_string(tp) : op;
}

int exit_code_of(const Summary& summary) {
  if (count(summary, Verdict::error) > 0 || summary.control_errors > 0) return 3;
  const bool finding = count(summary, Verdict::drift) > 0 ||
                       count(summary, Verdict::nondeterministic) > 0 ||
                       count(summary, Verdict::inaccurate) > 0;
  return finding || !summary.harness_failures.empty() ? 1 : 0;
}

Summary summarize(const std::vector<CaseOutcome>& results,
                  const std::vector<std::string>& op_order) {
  Summary summary;
  summary.cases = static_cast<std::int64_t>(results.size());
  std::map<std::string, ControlGroup> groups, observed;
  auto count_into = [](std::map<std::string, ControlGroup>& into, const CaseOutcome& r) {
    ControlGroup& group = into[r.op + "/" + r.impl + "/" + r.dtype + "/" + r.pass];
    group.op = r.op;
    group.impl = r.impl;
    group.dtype = r.dtype;
    group.pass = r.pass;
    group.cases++;
    if (r.verdict == Verdict::drift || r.verdict == Verdict::nondeterministic) group.drifted++;
    if (r.drift_needs_rows > 0) {
      group.without_chance++;
      group.largest_batch = std::max(group.largest_batch, r.rows);
      group.needs_rows = r.drift_needs_rows;
    }
  };
  for (const auto& r : results) {
    if (r.control) {
      if (r.observation && r.verdict != Verdict::skipped && r.verdict != Verdict::error)
        count_into(observed, r);
      if (!r.expected_to_drift || r.verdict == Verdict::skipped) continue;
      count_into(groups, r);
      if (r.verdict == Verdict::error) summary.control_errors++;
      continue;
    }
    summary.verdicts[to_string(r.verdict)]++;
  }
  for (const auto& op : op_order) {
    for (const auto& r : results) {
      if (r.control || r.op != op || !is_failure(r.verdict)) continue;
      summary.first_failing_op = op;
      summary.first_failing_case = r.id;
      break;
    }
    if (summary.first_failing_op) break;
  }
  for (const auto& [key, group] : groups) {
    summary.controls.push_back(group);
    const std::string control =
        "control " + group.op + "/" + group.impl + " " + group.dtype + " " + group.pass;
    if (group.lost_sight()) {
      summary.harness_failures.push_back(
          control + " did not drift in any of its " +
          std::to_string(group.cases - group.without_chance) + " cases" +
          (group.without_chance > 0 ? " that reached its switch point" : "") +
          ": the harness lost its sight");
    }
    if (group.no_chance()) {
      summary.controls_without_chance.push_back(
          control + " had no chance to drift: its batches go up to " +
          std::to_string(group.largest_batch) + " rows and its path switches at " +
          std::to_string(group.needs_rows) + " (add batch " + std::to_string(group.needs_rows) +
          ", or \"switch-points\", to the spec)");
    }
  }
  for (const auto& [key, group] : observed) summary.observations.push_back(group);
  summary.exit_code = exit_code_of(summary);
  return summary;
}

Summary summarize(const std::vector<CaseResult>& results,
                  const std::vector<std::string>& op_order) {
  return summarize(outcomes_of(results), op_order);
}

Summary shard_summary(Summary summary) {
  summary.harness_failures.clear();
  summary.controls_without_chance.clear();
  summary.exit_code = exit_code_of(summary);
  return summary;
}

StatusMatrix build_matrix(const std::vector<CaseOutcome>& results,
                          const std::vector<std::string>& op_order) {
  StatusMatrix matrix;
  std::set<std::string> dtypes_seen;
  std::map<std::string, std::set<int>> tps_seen;  // op -> its TP sizes
  for (const auto& r : results) {
    if (r.control) continue;
    tps_seen[r.op].insert(r.tp);
    dtypes_seen.insert(r.dtype);
    MatrixCell& cell = matrix.cells[matrix_row_name(r.op, r.tp)][r.dtype][r.pass];
    cell.counts[to_string(r.verdict)]++;
    if (cell.status.empty() || severity(r.verdict) > severity(*parse_verdict(cell.status))) {
      cell.status = to_string(r.verdict);
    }
  }
  for (const auto& op : op_order) {
    for (int tp : tps_seen[op]) matrix.ops.push_back(matrix_row_name(op, tp));
  }
  for (const char* dtype : {"bf16", "fp32", "fp16", "fp8"}) {
    if (dtypes_seen.count(dtype)) matrix.dtypes.push_back(dtype);
  }
  return matrix;
}

StatusMatrix build_matrix(const std::vector<CaseResult>& results,
                          const std::vector<std::string>& op_order) {
  return build_matrix(outcomes_of(results), op_order);
}

}  // namespace bitcheck
