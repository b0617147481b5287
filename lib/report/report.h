// Reports: one versioned JSON document per run (meta, per-case results, summary, first failing
// op, status matrix), written whole or not at all; and the terminal summary.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/case_json.h"
#include "report/summary.h"
#include "run/runner.h"

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

// Recomputes summary, first failing op and status matrix of a report from its results.
void refresh_report_summary(nlohmann::json& report, const std::vector<std::string>& op_order);
// Combines shard reports into one (results concatenated, duplicates refused, summary recomputed).
nlohmann::json merge_reports(const std::vector<nlohmann::json>& reports,
                             const std::vector<std::string>& sources,
                             const std::vector<std::string>& op_order);
nlohmann::json matrix_to_json(const StatusMatrix& matrix);
nlohmann::json summary_to_json(const Summary& summary);

// The report of a run from its typed results: meta, every case's entry (case_entry), the
// summary, the first failing op, the status matrix and where the time went. Op order and report
// extensions from the registry.
nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results, const Registry& registry);
// The same with the summary given (a shard's: shard_summary).
nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results, const Summary& summary,
                            const Registry& registry);

// Writes to a temporary file beside `path`, then renames: never a half-written report.
void write_file_atomically(const std::string& path, const std::string& contents);

// The status matrix, controls, time split, verdicts, the ops' report extensions and the first
// failing op of a report, for the terminal.
std::string render_terminal_summary(const nlohmann::json& report, const Registry& registry);

// One number through a printf pattern, e.g. printf_number("%.3fx", 0.95) == "0.950x".
std::string printf_number(const char* pattern, double value);
// Bytes in decimal units, e.g. bytes_text(4.2e9) == "4.2 GB".
std::string bytes_text(double bytes);

}  // namespace bitcheck
