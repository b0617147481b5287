// Reports: one versioned JSON document per run (meta, per-case results, summary, first failing
// op, status matrix), written whole or not at all; and the terminal summary.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitcheck/runner.h"
#include "bitcheck/verdict.h"

namespace bitcheck {

inline constexpr int report_schema_version = 1;

struct RunMeta {
  std::vector<std::string> argv;
  std::string spec_source;
  std::string contract_source;
  std::string started_at;  // ISO 8601 UTC
  double wall_seconds = 0;
  bool interrupted = false;
};

nlohmann::json case_to_json(const CaseResult& result);
nlohmann::json drift_to_json(const DriftMetrics& metrics);

// Cell of the status matrix: op x dtype x pass, over invariant impls (controls are separate).
struct MatrixCell {
  std::map<std::string, std::int64_t> counts;  // verdict -> cases
  std::string status;                          // the most severe verdict present
};
struct StatusMatrix {
  std::vector<std::string> ops;  // execution order
  std::vector<std::string> dtypes;
  std::map<std::string, std::map<std::string, std::map<std::string, MatrixCell>>> cells;  // op->dtype->pass
};

struct ControlGroup {  // one control impl x dtype x pass expected to drift
  std::string op, impl, dtype, pass;
  std::int64_t cases = 0, drifted = 0;
  bool lost_sight() const { return cases > 0 && drifted == 0; }
};

struct Summary {
  std::int64_t cases = 0;
  std::map<std::string, std::int64_t> verdicts;  // over invariant impls
  std::vector<ControlGroup> controls;
  std::optional<std::string> first_failing_op;
  std::optional<std::string> first_failing_case;
  std::vector<std::string> harness_failures;  // controls that lost sight
  int exit_code = 0;
};

// What summaries and matrices need of a case, from a live result or from a report's JSON (so
// merged shards and re-read reports summarize exactly like a live run).
struct CaseOutcome {
  std::string id, op, impl, dtype, pass;
  Verdict verdict = Verdict::skipped;
  bool control = false;
  bool expected_to_drift = false;
};
CaseOutcome outcome_of(const CaseResult& result);
CaseOutcome outcome_from_json(const nlohmann::json& case_json);

Summary summarize(const std::vector<CaseOutcome>& results, const std::vector<std::string>& op_order);
StatusMatrix build_matrix(const std::vector<CaseOutcome>& results, const std::vector<std::string>& op_order);
Summary summarize(const std::vector<CaseResult>& results, const std::vector<std::string>& op_order);
StatusMatrix build_matrix(const std::vector<CaseResult>& results, const std::vector<std::string>& op_order);

// Recomputes summary, first failing op and status matrix of a report from its results.
void refresh_report_summary(nlohmann::json& report, const std::vector<std::string>& op_order);
// Combines shard reports into one (results concatenated, duplicates refused, summary recomputed).
nlohmann::json merge_reports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& sources,
                             const std::vector<std::string>& op_order);
nlohmann::json matrix_to_json(const StatusMatrix& matrix);
nlohmann::json summary_to_json(const Summary& summary);

nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results,
                            const std::vector<std::string>& op_order);
// The same from results already in report form (case_to_json), e.g. sent by a sweep worker.
nlohmann::json build_report_from_json(const RunMeta& meta, const nlohmann::json& environment,
                                      const std::vector<nlohmann::json>& case_results,
                                      const std::vector<std::string>& op_order);

// Writes to a temporary file beside `path`, then renames: never a half-written report.
void write_file_atomically(const std::string& path, const std::string& contents);

std::string render_terminal_summary(const nlohmann::json& report);

// One number through a printf pattern, e.g. printf_number("%.3fx", 0.95) == "0.950x".
std::string printf_number(const char* pattern, double value);

}  // namespace bitcheck
