// Report construction, status matrix, summary, atomic writes and the terminal rendering.
#include "bitcheck/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "bitcheck/dtype.h"
#include "bitcheck/matrix_render.h"
#include "chain/chain.h"

namespace bitcheck {
namespace {

nlohmann::json mismatch_to_json(const Mismatch& mismatch, DType dtype) {
  return {{"row", mismatch.row},
          {"column", mismatch.column},
          {"expected", mismatch.expected},
          {"actual", mismatch.actual},
          {"expected_bits", hex_bits(dtype, mismatch.expected_bits)},
          {"actual_bits", hex_bits(dtype, mismatch.actual_bits)}};
}

// JSON has no Inf/NaN: a non-finite magnitude is written as a string.
nlohmann::json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}

}  // namespace

nlohmann::json drift_to_json(const DriftMetrics& metrics) {
  nlohmann::json j = {{"layout", metrics.layout},
                      {"reference_layout", metrics.reference_layout},
                      {"tensor", metrics.tensor},
                      {"dtype", to_string(metrics.dtype)},
                      {"compared", metrics.compared},
                      {"mismatch_count", metrics.mismatch_count},
                      {"rows_differing", metrics.rows_differing},
                      {"differing_rows", metrics.differing_rows},
                      {"max_abs_diff", number(metrics.max_abs_diff)},
                      {"max_rel_diff", number(metrics.max_rel_diff)},
                      {"max_ulp_distance", metrics.max_ulp_distance}};
  if (metrics.first_mismatch) j["first_mismatch"] = mismatch_to_json(*metrics.first_mismatch, metrics.dtype);
  return j;
}

nlohmann::json case_to_json(const CaseResult& result) {
  const CaseSpec& spec = result.spec;
  nlohmann::json j = {{"id", spec.id()},
                      {"case_index", spec.index},
                      {"op", spec.op},
                      {"impl", spec.impl},
                      {"backend", result.backend},
                      {"control", result.is_control},
                      {"dtype", spec.dtype_name},
                      {"pass", to_string(spec.pass)},
                      {"dims", spec.dims},
                      {"rows", spec.rows},
                      {"seed", spec.seed},
                      {"repeats", spec.repeats},
                      {"alone_rows", spec.alone_rows},
                      {"layouts", spec.layouts},
                      {"verdict", to_string(result.verdict)}};
  if (spec.special_values > 0) j["special_values"] = spec.special_values;
  if (!result.reason.empty()) j["reason"] = result.reason;
  if (result.verdict == Verdict::skipped) return j;
  if (result.is_control) j["expected_to_drift"] = result.expected_to_drift;
  j["layouts_run"] = result.layouts_run;
  j["layout_comparisons"] = result.layout_comparisons;
  j["drift"] = nlohmann::json::array();
  for (const auto& d : result.drift) j["drift"].push_back(drift_to_json(d));
  j["nondeterminism"] = nlohmann::json::array();
  for (const auto& d : result.nondeterminism) j["nondeterminism"].push_back(drift_to_json(d));
  j["accuracy"] = nlohmann::json::array();
  for (const auto& a : result.accuracy) {
    nlohmann::json aj = {{"tensor", a.tensor},       {"compared", a.compared},
                         {"violations", a.violations}, {"nan_count", a.nan_count},
                         {"nonfinite_matched", a.nonfinite_matched},
                         {"max_abs_error", number(a.max_abs_error)},
                         {"max_rel_error", number(a.max_rel_error)},
                         {"atol", a.atol},           {"rtol", a.rtol},
                         {"passed", a.passed()}};
    if (a.worst) {
      aj["worst"] = {{"row", a.worst->row}, {"column", a.worst->column},
                     {"reference", a.worst->expected}, {"actual", a.worst->actual}};
    }
    j["accuracy"].push_back(aj);
  }
  if (!result.fingerprint.empty()) j["fingerprint"] = result.fingerprint;
  if (!result.impl_config.is_null()) j["impl_config"] = result.impl_config;
  j["timings"] = {{"impl_seconds", result.timings.impl_seconds},
                  {"reference_seconds", result.timings.reference_seconds},
                  {"compare_seconds", result.timings.compare_seconds},
                  {"inputs_seconds", result.timings.inputs_seconds},
                  {"total_seconds", result.timings.total_seconds}};
  // The chain: every op's status in execution order and the first failing op per phase.
  if (spec.op == "chain") j["chain"] = chain::op_status(j);
  return j;
}

StatusMatrix build_matrix(const std::vector<CaseOutcome>& results, const std::vector<std::string>& op_order) {
  StatusMatrix matrix;
  std::set<std::string> ops_seen, dtypes_seen;
  for (const auto& r : results) {
    if (r.control) continue;
    ops_seen.insert(r.op);
    dtypes_seen.insert(r.dtype);
    MatrixCell& cell = matrix.cells[r.op][r.dtype][r.pass];
    cell.counts[to_string(r.verdict)]++;
    if (cell.status.empty() || severity(r.verdict) > severity(*parse_verdict(cell.status))) {
      cell.status = to_string(r.verdict);
    }
  }
  for (const auto& op : op_order) {
    if (ops_seen.count(op)) matrix.ops.push_back(op);
  }
  for (const char* dtype : {"bf16", "fp32", "fp16", "fp8"}) {
    if (dtypes_seen.count(dtype)) matrix.dtypes.push_back(dtype);
  }
  return matrix;
}

nlohmann::json matrix_to_json(const StatusMatrix& matrix) {
  nlohmann::json j = {{"ops", matrix.ops}, {"dtypes", matrix.dtypes}, {"passes", {"forward", "backward"}}};
  j["cells"] = nlohmann::json::object();
  for (const auto& [op, by_dtype] : matrix.cells) {
    for (const auto& [dtype, by_pass] : by_dtype) {
      for (const auto& [pass, cell] : by_pass) {
        j["cells"][op][dtype][pass] = {{"status", cell.status}, {"counts", cell.counts}};
      }
    }
  }
  return j;
}

Summary summarize(const std::vector<CaseOutcome>& results, const std::vector<std::string>& op_order) {
  Summary summary;
  summary.cases = static_cast<std::int64_t>(results.size());
  std::map<std::string, ControlGroup> groups;
  bool any_error = false, any_finding = false;
  for (const auto& r : results) {
    if (r.control) {
      if (!r.expected_to_drift || r.verdict == Verdict::skipped) continue;
      std::string key = r.op + "/" + r.impl + "/" + r.dtype + "/" + r.pass;
      ControlGroup& group = groups[key];
      group.op = r.op;
      group.impl = r.impl;
      group.dtype = r.dtype;
      group.pass = r.pass;
      group.cases++;
      if (r.verdict == Verdict::drift || r.verdict == Verdict::nondeterministic) group.drifted++;
      if (r.verdict == Verdict::error) any_error = true;
      continue;
    }
    summary.verdicts[to_string(r.verdict)]++;
    any_error = any_error || r.verdict == Verdict::error;
    any_finding = any_finding || (is_failure(r.verdict) && r.verdict != Verdict::error);
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
    if (group.lost_sight()) {
      summary.harness_failures.push_back("control " + group.op + "/" + group.impl + " " + group.dtype + " " +
                                         group.pass + " did not drift in any of its " +
                                         std::to_string(group.cases) + " cases: the harness lost its sight");
    }
  }
  summary.exit_code = any_error ? 3 : (any_finding || !summary.harness_failures.empty()) ? 1 : 0;
  return summary;
}

namespace {
std::vector<CaseOutcome> outcomes_of(const std::vector<CaseResult>& results) {
  std::vector<CaseOutcome> outcomes;
  for (const auto& r : results) outcomes.push_back(outcome_of(r));
  return outcomes;
}
}  // namespace

CaseOutcome outcome_of(const CaseResult& r) {
  return {r.spec.id(), r.spec.op, r.spec.impl, r.spec.dtype_name, to_string(r.spec.pass), r.verdict, r.is_control,
          r.expected_to_drift};
}

CaseOutcome outcome_from_json(const nlohmann::json& c) {
  CaseOutcome o;
  o.id = c.at("id").get<std::string>();
  o.op = c.at("op").get<std::string>();
  o.impl = c.at("impl").get<std::string>();
  o.dtype = c.at("dtype").get<std::string>();
  o.pass = c.at("pass").get<std::string>();
  o.verdict = parse_verdict(c.at("verdict").get<std::string>()).value_or(Verdict::error);
  o.control = c.value("control", false);
  o.expected_to_drift = c.value("expected_to_drift", false);
  return o;
}

Summary summarize(const std::vector<CaseResult>& results, const std::vector<std::string>& op_order) {
  return summarize(outcomes_of(results), op_order);
}

StatusMatrix build_matrix(const std::vector<CaseResult>& results, const std::vector<std::string>& op_order) {
  return build_matrix(outcomes_of(results), op_order);
}

void refresh_report_summary(nlohmann::json& report, const std::vector<std::string>& op_order) {
  std::vector<CaseOutcome> outcomes;
  for (const auto& c : report.at("results")) outcomes.push_back(outcome_from_json(c));
  report["summary"] = summary_to_json(summarize(outcomes, op_order));
  report["first_failing_op"] = report["summary"]["first_failing_op"];
  report["status_matrix"] = matrix_to_json(build_matrix(outcomes, op_order));
}

nlohmann::json merge_reports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& sources,
                             const std::vector<std::string>& op_order) {
  if (reports.empty()) throw std::invalid_argument("merge needs at least one report");
  nlohmann::json merged = reports.front();
  merged["results"] = nlohmann::json::array();
  merged["meta"]["shards"] = nlohmann::json::array();
  std::set<std::string> ids;
  double wall = 0;
  bool interrupted = false;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& report = reports[i];
    if (report.value("schema_version", 0) != report_schema_version) {
      throw std::invalid_argument(sources[i] + ": report schema_version " + std::to_string(report.value("schema_version", 0)) +
                                  ", expected " + std::to_string(report_schema_version));
    }
    for (const auto& c : report.at("results")) {
      std::string id = c.at("id").get<std::string>();
      if (!ids.insert(id).second) throw std::invalid_argument(sources[i] + ": case " + id + " is in two shards");
      merged["results"].push_back(c);
    }
    merged["meta"]["shards"].push_back({{"source", sources[i]},
                                        {"command_line", report["meta"].value("command_line", "")},
                                        {"host", report["meta"].value("host", "")},
                                        {"wall_seconds", report["meta"].value("wall_seconds", 0.0)}});
    wall = std::max(wall, report["meta"].value("wall_seconds", 0.0));
    if (i > 0 && report["meta"].contains("time_split")) {  // shard 0's split is the starting value
      for (const auto& [part, seconds] : report["meta"]["time_split"].items()) {
        merged["meta"]["time_split"][part] = merged["meta"]["time_split"].value(part, 0.0) + seconds.get<double>();
      }
    }
    interrupted = interrupted || report["meta"].value("interrupted", false);
  }
  merged["meta"]["wall_seconds"] = wall;
  merged["meta"]["interrupted"] = interrupted;
  // Shards of one sweep: restore the spec's case order so merged equals unsharded.
  auto order_key = [](const nlohmann::json& c) { return c.value("case_index", std::int64_t(0)); };
  std::stable_sort(merged["results"].begin(), merged["results"].end(),
                   [&](const nlohmann::json& a, const nlohmann::json& b) { return order_key(a) < order_key(b); });
  refresh_report_summary(merged, op_order);
  return merged;
}

nlohmann::json summary_to_json(const Summary& summary) {
  nlohmann::json j = {{"cases", summary.cases}, {"verdicts", summary.verdicts}, {"exit_code", summary.exit_code}};
  j["first_failing_op"] = summary.first_failing_op ? nlohmann::json(*summary.first_failing_op) : nlohmann::json();
  j["first_failing_case"] = summary.first_failing_case ? nlohmann::json(*summary.first_failing_case) : nlohmann::json();
  j["harness_failures"] = summary.harness_failures;
  j["controls"] = nlohmann::json::array();
  for (const auto& g : summary.controls) {
    j["controls"].push_back({{"op", g.op}, {"impl", g.impl}, {"dtype", g.dtype}, {"pass", g.pass},
                             {"cases", g.cases}, {"drifted", g.drifted}, {"lost_sight", g.lost_sight()}});
  }
  return j;
}

nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results, const std::vector<std::string>& op_order) {
  std::vector<nlohmann::json> case_results;
  case_results.reserve(results.size());
  for (const auto& r : results) case_results.push_back(case_to_json(r));
  return build_report_from_json(meta, environment, case_results, op_order);
}

nlohmann::json build_report_from_json(const RunMeta& meta, const nlohmann::json& environment,
                                      const std::vector<nlohmann::json>& case_results,
                                      const std::vector<std::string>& op_order) {
  nlohmann::json report;
  report["schema_version"] = report_schema_version;
  report["tool"] = "bitcheck";
  nlohmann::json meta_json = environment;
  meta_json["argv"] = meta.argv;
  meta_json["command_line"] = [&] {
    std::string line;
    for (const auto& arg : meta.argv) line += (line.empty() ? "" : " ") + arg;
    return line;
  }();
  meta_json["spec"] = meta.spec_source;
  meta_json["contract"] = meta.contract_source;
  meta_json["started_at"] = meta.started_at;
  meta_json["wall_seconds"] = meta.wall_seconds;
  meta_json["interrupted"] = meta.interrupted;
  report["meta"] = meta_json;
  report["results"] = case_results;
  refresh_report_summary(report, op_order);
  // Where the sweep's time went, summed over cases: the impls (device work and transfers), the FP32
  // references, the bitwise and accuracy comparisons, input generation.
  nlohmann::json split = {{"impl_seconds", 0.0}, {"reference_seconds", 0.0}, {"compare_seconds", 0.0}, {"inputs_seconds", 0.0}};
  for (const auto& c : case_results) {
    if (!c.contains("timings")) continue;  // skipped cases
    for (const char* part : {"impl_seconds", "reference_seconds", "compare_seconds", "inputs_seconds"}) {
      split[part] = split[part].get<double>() + c["timings"].value(part, 0.0);
    }
  }
  report["meta"]["time_split"] = split;
  return report;
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  std::filesystem::path target(path);
  std::filesystem::path temporary = target;
  temporary += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream stream(temporary, std::ios::binary | std::ios::trunc);
    if (!stream) throw std::runtime_error("cannot write " + temporary.string());
    stream << contents;
    stream.flush();
    if (!stream) {
      stream.close();
      std::filesystem::remove(temporary);
      throw std::runtime_error("write failed: " + temporary.string());
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, target, error);
  if (error) {
    std::filesystem::remove(temporary);
    throw std::runtime_error("cannot rename " + temporary.string() + " to " + path + ": " + error.message());
  }
}

namespace {

// Chain cases: the first failing op of each failing invariant chain, and whether every control
// swapped into the chain drifted first at the op it was swapped into.
std::string render_chain_summary(const nlohmann::json& report) {
  std::ostringstream out;
  std::int64_t localized = 0, swaps = 0;
  std::vector<std::string> elsewhere;
  for (const auto& result : report["results"]) {
    if (!result.contains("chain") || result["chain"].is_null()) continue;
    const auto& status = result["chain"];
    if (status.contains("localized")) {
      if (status["localized"].is_null()) continue;
      ++swaps;
      if (status["localized"].get<bool>()) {
        ++localized;
      } else {
        elsewhere.push_back(result["id"].get<std::string>());
      }
      continue;
    }
    if (result["verdict"] == "pass") continue;
    out << "chain " << result["id"].get<std::string>() << " " << result["verdict"].get<std::string>() << "\n";
    for (const auto& line : chain::failing_op_lines(status)) out << "  " << line << "\n";
  }
  if (swaps > 0) {
    out << "chain controls: " << localized << "/" << swaps << " drifting swaps first fail at the swapped op\n";
    for (const auto& id : elsewhere) out << "  NOT LOCALIZED: " << id << "\n";
  }
  return out.str();
}

}  // namespace

std::string render_terminal_summary(const nlohmann::json& report) {
  std::ostringstream out;
  const auto& matrix = report["status_matrix"];
  std::size_t name_width = 4;
  for (const auto& op : matrix["ops"]) name_width = std::max(name_width, op.get<std::string>().size());
  auto padded = [](const std::string& text, std::size_t width) {
    return text + std::string(width > text.size() ? width - text.size() : 1, ' ');
  };
  constexpr std::size_t cell_width = 26;
  out << "status matrix (invariant impls; cases that ran, + skipped)\n  " << padded("op", name_width + 2)
      << padded("pass", 10);
  for (const auto& dtype : matrix["dtypes"]) out << padded(dtype.get<std::string>(), cell_width);
  out << "\n";
  for (const auto& op : matrix["ops"]) {
    for (const char* pass : {"forward", "backward"}) {
      std::string line = "  " + padded(std::string(pass) == "forward" ? op.get<std::string>() : "", name_width + 2) +
                         padded(pass, 10);
      for (const auto& dtype : matrix["dtypes"]) {
        line += padded(matrix_cell_text(matrix, op.get<std::string>(), dtype.get<std::string>(), pass), cell_width);
      }
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << "\n";
    }
  }
  const auto& summary = report["summary"];
  std::int64_t groups = 0, drifted = 0;
  for (const auto& g : summary["controls"]) {
    ++groups;
    if (!g["lost_sight"].get<bool>()) ++drifted;
  }
  out << "controls: " << drifted << "/" << groups << " (control x dtype x pass) groups drifted as expected\n";
  for (const auto& failure : summary["harness_failures"]) out << "HARNESS FAILURE: " << failure.get<std::string>() << "\n";
  if (report["meta"].contains("time_split")) {
    const auto& split = report["meta"]["time_split"];
    char line[200];
    std::snprintf(line, sizeof line, "time: impls %.1f s, references %.1f s, comparisons %.1f s, inputs %.1f s\n",
                  split["impl_seconds"].get<double>(), split["reference_seconds"].get<double>(),
                  split["compare_seconds"].get<double>(), split["inputs_seconds"].get<double>());
    out << line;
  }
  out << "verdicts:";
  for (const auto& [verdict, n] : summary["verdicts"].items()) out << " " << verdict << "=" << n.get<std::int64_t>();
  out << "\n";
  out << render_chain_summary(report);
  if (summary["first_failing_op"].is_null()) {
    out << "first failing op: none\n";
  } else {
    out << "first failing op: " << summary["first_failing_op"].get<std::string>() << " (case "
        << summary["first_failing_case"].get<std::string>() << ")\n";
  }
  return out.str();
}

std::string printf_number(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

}  // namespace bitcheck
