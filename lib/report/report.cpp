// Report construction from typed results, shard merging, atomic writes and the terminal rendering.
#include "report/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/dtype.h"
#include "report/coverage.h"
#include "report/matrix_render.h"

namespace bitcheck {
namespace {

std::vector<std::string> op_order_of(const Registry& registry) {
  std::vector<std::string> order;
  for (const OpDef* op : registry.ops()) order.push_back(op->name);
  return order;
}

// A shard's profile added into the merged one, phase by phase.
void add_profile(const nlohmann::json& shard, nlohmann::json& merged) {
  for (const auto& [phase, cost] : shard.items()) {
    nlohmann::json& total = merged[phase];
    total["seconds"] = total.value("seconds", 0.0) + cost.value("seconds", 0.0);
    total["bytes"] = total.value("bytes", std::uint64_t(0)) + cost.value("bytes", std::uint64_t(0));
  }
}

}  // namespace

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  std::size_t unit = 0;
  while (bytes >= 1000.0 && unit + 1 < std::size(units)) {
    bytes /= 1000.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

namespace {

// "profile: inputs 1.2 s (3.4 MB), staging ..., bookkeeping 0.0 s (0 B)": the sweep's phases.
std::string profile_line(const nlohmann::json& profile) {
  std::string line = "profile:";
  for (std::size_t i = 0; i < phase_count; ++i) {
    const std::string phase = phase_name(static_cast<Phase>(i));
    if (!profile.contains(phase)) continue;
    const nlohmann::json& cost = profile[phase];
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, " %.2f s", cost.value("seconds", 0.0));
    line +=
        (i == 0 ? " " : ", ") + phase + seconds + " (" + bytes_text(cost.value("bytes", 0.0)) + ")";
  }
  return line + "\n";
}

// "host memory: peak 4.2 GB (CASE), the process's resident set during a case": the case with the
// largest timings.host_peak_bytes, where cases measured it.
std::string host_memory_line(const nlohmann::json& report) {
  double peak = 0;
  std::string at;
  for (const auto& c : report.value("results", nlohmann::json::array())) {
    const double bytes = c.value("timings", nlohmann::json::object()).value("host_peak_bytes", 0.0);
    if (bytes > peak) {
      peak = bytes;
      at = c.value("id", "");
    }
  }
  if (peak <= 0) return "";
  return "host memory: peak " + bytes_text(peak) + " (" + at +
         "), the process's resident set during a case\n";
}

}  // namespace

nlohmann::json matrix_to_json(const StatusMatrix& matrix) {
  nlohmann::json j = {
      {"ops", matrix.ops}, {"dtypes", matrix.dtypes}, {"passes", {"forward", "backward"}}};
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

void refresh_report_summary(nlohmann::json& report, const std::vector<std::string>& op_order) {
  std::vector<CaseOutcome> outcomes;
  for (const auto& c : report.at("results")) outcomes.push_back(outcome_from_json(c));
  report["summary"] = summary_to_json(summarize(outcomes, op_order));
  report["first_failing_op"] = report["summary"]["first_failing_op"];
  report["status_matrix"] = matrix_to_json(build_matrix(outcomes, op_order));
  if (report.contains("paths_declared"))
    report["coverage"] = coverage_summary_json(compute_coverage(report));
}

nlohmann::json merge_reports(const std::vector<nlohmann::json>& reports,
                             const std::vector<std::string>& sources,
                             const std::vector<std::string>& op_order) {
  if (reports.empty()) throw std::invalid_argument("merge needs at least one report");
  nlohmann::json merged = reports.front();
  merged["results"] = nlohmann::json::array();
  merged["meta"]["shards"] = nlohmann::json::array();
  merged["paths_declared"] = nlohmann::json::object();
  std::set<std::string> ids;
  double wall = 0;
  bool interrupted = false;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& report = reports[i];
    if (report.value("schema_version", 0) != report_schema_version) {
      throw std::invalid_argument(sources[i] + ": report schema_version " +
                                  std::to_string(report.value("schema_version", 0)) +
                                  ", expected " + std::to_string(report_schema_version));
    }
    if (auto declared = report.find("paths_declared"); declared != report.end())
      merged["paths_declared"].update(*declared);
    for (const auto& c : report.at("results")) {
      std::string id = c.at("id").get<std::string>();
      if (!ids.insert(id).second)
        throw std::invalid_argument(sources[i] + ": case " + id + " is in two shards");
      merged["results"].push_back(c);
    }
    merged["meta"]["shards"].push_back(
        {{"source", sources[i]},
         {"command_line", report["meta"].value("command_line", "")},
         {"host", report["meta"].value("host", "")},
         {"wall_seconds", report["meta"].value("wall_seconds", 0.0)}});
    wall = std::max(wall, report["meta"].value("wall_seconds", 0.0));
    if (i > 0 && report["meta"].contains("time_split")) {  // shard 0's split is the starting value
      for (const auto& [part, seconds] : report["meta"]["time_split"].items()) {
        merged["meta"]["time_split"][part] =
            merged["meta"]["time_split"].value(part, 0.0) + seconds.get<double>();
      }
    }
    if (i > 0 && report["meta"].contains("profile"))
      add_profile(report["meta"]["profile"], merged["meta"]["profile"]);
    // The shards' workers, faults and retries, counted over all of them.
    if (i > 0 && report["meta"].contains("isolation") && merged["meta"].contains("isolation")) {
      for (const auto& [count, value] : report["meta"]["isolation"].items()) {
        if (value.is_number_integer())
          merged["meta"]["isolation"][count] =
              merged["meta"]["isolation"].value(count, 0) + value.get<int>();
      }
    }
    interrupted = interrupted || report["meta"].value("interrupted", false);
  }
  merged["meta"]["wall_seconds"] = wall;
  merged["meta"]["interrupted"] = interrupted;
  // Shards of one sweep: restore the spec's case order so merged equals unsharded.
  auto order_key = [](const nlohmann::json& c) { return c.value("case_index", std::int64_t(0)); };
  std::stable_sort(merged["results"].begin(), merged["results"].end(),
                   [&](const nlohmann::json& a, const nlohmann::json& b) {
                     return order_key(a) < order_key(b);
                   });
  refresh_report_summary(merged, op_order);
  return merged;
}

nlohmann::json summary_to_json(const Summary& summary) {
  nlohmann::json j = {
      {"cases", summary.cases}, {"verdicts", summary.verdicts}, {"exit_code", summary.exit_code}};
  j["first_failing_op"] =
      summary.first_failing_op ? nlohmann::json(*summary.first_failing_op) : nlohmann::json();
  j["first_failing_case"] =
      summary.first_failing_case ? nlohmann::json(*summary.first_failing_case) : nlohmann::json();
  j["harness_failures"] = summary.harness_failures;
  j["controls_without_chance"] = summary.controls_without_chance;
  j["controls"] = nlohmann::json::array();
  for (const auto& g : summary.controls) {
    nlohmann::json group = {{"op", g.op},
                            {"impl", g.impl},
                            {"dtype", g.dtype},
                            {"pass", g.pass},
                            {"cases", g.cases},
                            {"drifted", g.drifted},
                            {"lost_sight", g.lost_sight()}};
    if (g.no_chance()) group["no_chance_needs_rows"] = g.needs_rows;
    j["controls"].push_back(group);
  }
  j["observations"] = nlohmann::json::array();
  for (const auto& g : summary.observations) {
    j["observations"].push_back({{"op", g.op},
                                 {"impl", g.impl},
                                 {"dtype", g.dtype},
                                 {"pass", g.pass},
                                 {"cases", g.cases},
                                 {"drifted", g.drifted}});
  }
  return j;
}

nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results, const Registry& registry) {
  return build_report(meta, environment, results, summarize(results, op_order_of(registry)),
                      registry);
}

nlohmann::json build_report(const RunMeta& meta, const nlohmann::json& environment,
                            const std::vector<CaseResult>& results, const Summary& summary,
                            const Registry& registry) {
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
  report["results"] = nlohmann::json::array();
  for (const auto& result : results) report["results"].push_back(case_entry(result, registry));
  report["summary"] = summary_to_json(summary);
  report["first_failing_op"] = report["summary"]["first_failing_op"];
  report["status_matrix"] = matrix_to_json(build_matrix(results, op_order_of(registry)));
  report["paths_declared"] = declared_paths_json(results, registry);
  report["coverage"] = coverage_summary_json(compute_coverage(report));
  // Where the run's time went, summed over the cases that ran: the impls (device work and
  // transfers), the FP32 references, the bitwise and accuracy comparisons, input generation.
  CaseTimings split;
  for (const auto& result : results) {
    if (result.verdict == Verdict::skipped) continue;
    split.impl_seconds += result.timings.impl_seconds;
    split.reference_seconds += result.timings.reference_seconds;
    split.compare_seconds += result.timings.compare_seconds;
    split.inputs_seconds += result.timings.inputs_seconds;
    split.profile += result.timings.profile;
  }
  report["meta"]["profile"] = profile_to_json(split.profile);
  report["meta"]["time_split"] = {{"impl_seconds", split.impl_seconds},
                                  {"reference_seconds", split.reference_seconds},
                                  {"compare_seconds", split.compare_seconds},
                                  {"inputs_seconds", split.inputs_seconds}};
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
    throw std::runtime_error("cannot rename " + temporary.string() + " to " + path + ": " +
                             error.message());
  }
}

namespace {

// A run with --provenance: how many cases recorded their kernels, and why a backend recorded none.
std::string provenance_line(const nlohmann::json& report) {
  const nlohmann::json& meta = report["meta"];
  const auto argv = meta.value("argv", std::vector<std::string>{});
  if (std::find(argv.begin(), argv.end(), "--provenance") == argv.end()) return "";
  std::int64_t cases = 0;
  for (const auto& c : report["results"]) cases += c.contains("kernels") ? 1 : 0;
  std::string line = "provenance: kernels recorded in " + std::to_string(cases) + " cases";
  for (const auto& [backend, facts] : meta.items()) {
    if (!facts.is_object() || !facts.contains("provenance")) continue;
    const nlohmann::json& state = facts["provenance"];
    if (!state.value("recording", false))
      line += "; " + backend + ": off (" + state.value("off_reason", std::string()) + ")";
  }
  return line + "\n";
}

}  // namespace

std::string render_terminal_summary(const nlohmann::json& report, const Registry& registry) {
  std::ostringstream out;
  const auto& matrix = report["status_matrix"];
  std::size_t name_width = 4;
  for (const auto& op : matrix["ops"])
    name_width = std::max(name_width, op.get<std::string>().size());
  auto padded = [](const std::string& text, std::size_t width) {
    return text + std::string(width > text.size() ? width - text.size() : 1, ' ');
  };
  constexpr std::size_t cell_width = 26;
  out << "status matrix (invariant impls; cases that ran, + skipped)\n  "
      << padded("op", name_width + 2) << padded("pass", 10);
  for (const auto& dtype : matrix["dtypes"]) out << padded(dtype.get<std::string>(), cell_width);
  out << "\n";
  for (const auto& op : matrix["ops"]) {
    for (const char* pass : {"forward", "backward"}) {
      std::string line =
          "  " +
          padded(std::string(pass) == "forward" ? op.get<std::string>() : "", name_width + 2) +
          padded(pass, 10);
      for (const auto& dtype : matrix["dtypes"]) {
        line +=
            padded(matrix_cell_text(matrix, op.get<std::string>(), dtype.get<std::string>(), pass),
                   cell_width);
      }
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << "\n";
    }
  }
  const auto& summary = report["summary"];
  std::int64_t groups = 0, drifted = 0;
  for (const auto& g : summary["controls"]) {
    ++groups;
    if (g["drifted"].get<std::int64_t>() > 0) ++drifted;
  }
  out << "controls: " << drifted << "/" << groups
      << " (control x dtype x pass) groups drifted as expected\n";
  for (const auto& failure : summary["harness_failures"])
    out << "HARNESS FAILURE: " << failure.get<std::string>() << "\n";
  for (const auto& note : summary.value("controls_without_chance", nlohmann::json::array()))
    out << "NO CHANCE: " << note.get<std::string>() << "\n";
  if (summary.contains("observations") && !summary["observations"].empty()) {
    std::int64_t observed = 0, drifting = 0;
    std::string held;
    for (const auto& g : summary["observations"]) {
      ++observed;
      if (g["drifted"].get<std::int64_t>() > 0) {
        ++drifting;
      } else {
        held += (held.empty() ? "" : ", ") + g["op"].get<std::string>() + "/" +
                g["impl"].get<std::string>() + " " + g["dtype"].get<std::string>() + " " +
                g["pass"].get<std::string>();
      }
    }
    out << "library defaults (observed, not a failure): " << drifting << "/" << observed
        << " (impl x dtype x pass) groups drifted on this device";
    if (!held.empty()) out << "; held: " << held;
    out << "\n";
  }
  if (report["meta"].contains("time_split")) {
    const auto& split = report["meta"]["time_split"];
    char line[200];
    std::snprintf(line, sizeof line,
                  "time: impls %.1f s, references %.1f s, comparisons %.1f s, inputs %.1f s\n",
                  split["impl_seconds"].get<double>(), split["reference_seconds"].get<double>(),
                  split["compare_seconds"].get<double>(), split["inputs_seconds"].get<double>());
    out << line;
  }
  out << provenance_line(report);
  if (report["meta"].contains("profile")) out << profile_line(report["meta"]["profile"]);
  out << host_memory_line(report);
  out << "verdicts:";
  for (const auto& [verdict, n] : summary["verdicts"].items())
    out << " " << verdict << "=" << n.get<std::int64_t>();
  out << "\n";
  for (const OpDef* op : registry.ops()) {
    if (op->report_extension && op->report_extension->run_summary) {
      out << op->report_extension->run_summary(report["results"]);
    }
  }
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
