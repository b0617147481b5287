// Status matrix renderers: markdown and JUnit XML (the HTML page is report_page.cpp).
#include "report/matrix_render.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "core/op.h"
#include "report/report.h"
#include "report/report_page.h"  // escape_html, for the JUnit XML too

namespace bitcheck {
namespace {

const char* const passes[] = {"forward", "backward"};

const nlohmann::json* cell_of(const nlohmann::json& matrix, const std::string& op,
                              const std::string& dtype, const std::string& pass) {
  const auto& cells = matrix["cells"];
  if (!cells.contains(op) || !cells[op].contains(dtype) || !cells[op][dtype].contains(pass))
    return nullptr;
  return &cells[op][dtype][pass];
}

// "pass 36" / "drift 3 of 36 (+2 skipped)" / "skipped 6"
std::string cell_text(const nlohmann::json* cell) {
  if (!cell) return "-";
  std::int64_t ran = 0, skipped = 0, worst = 0;
  std::string status = (*cell)["status"].get<std::string>();
  for (const auto& [verdict, n] : (*cell)["counts"].items()) {
    if (verdict == "skipped")
      skipped += n.get<std::int64_t>();
    else
      ran += n.get<std::int64_t>();
    if (verdict == status) worst = n.get<std::int64_t>();
  }
  std::string text;
  if (status == "skipped") return "skipped " + std::to_string(skipped);
  text = status == "pass" ? "pass " + std::to_string(ran)
                          : status + " " + std::to_string(worst) + " of " + std::to_string(ran);
  if (skipped) text += " (+" + std::to_string(skipped) + " skipped)";
  return text;
}

// The distinct kernel names of a layout's recorded kernels, " + " between.
std::string layout_kernel_names(const nlohmann::json& kernels, const std::string& layout) {
  if (!kernels.contains(layout)) return "";
  std::vector<std::string> names;
  for (const auto& use : kernels[layout]) {
    const std::string name = use["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : " + ") + name;
  return text;
}

std::string finding_text(const nlohmann::json& c) {
  std::ostringstream out;
  if (c.contains("reason")) out << c["reason"].get<std::string>();
  for (const char* list : {"nondeterminism", "drift"}) {
    if (!c.contains(list)) continue;
    for (const auto& d : c[list]) {
      out << list << ": tensor " << d["tensor"].get<std::string>() << " layout "
          << d["layout"].get<std::string>() << " vs " << d["reference_layout"].get<std::string>()
          << ", " << d["mismatch_count"] << " of " << d["compared"] << " differ, max abs "
          << d["max_abs_diff"] << ", max rel " << d["max_rel_diff"] << ", max ulp "
          << d["max_ulp_distance"];
      if (d.contains("first_mismatch")) {
        const auto& m = d["first_mismatch"];
        out << ", first at row " << m["row"] << " column " << m["column"] << ": " << m["expected"]
            << " (" << m["expected_bits"].get<std::string>() << ") vs " << m["actual"] << " ("
            << m["actual_bits"].get<std::string>() << ")";
      }
      out << "\n";
      const std::string kernels = finding_kernels_text(c, d.value("layout", std::string()),
                                                       d.value("reference_layout", std::string()));
      if (!kernels.empty()) out << "  " << kernels << "\n";
    }
  }
  if (c.contains("accuracy")) {
    for (const auto& a : c["accuracy"]) {
      if (a["passed"].get<bool>()) continue;
      out << "inaccurate: tensor " << a["tensor"].get<std::string>() << " max abs error "
          << a["max_abs_error"] << " (atol " << a["atol"] << ", rtol " << a["rtol"] << "), "
          << a["violations"] << " violations, " << a["nan_count"] << " NaN\n";
    }
  }
  return out.str();
}

// One drifted case of a library default in a line: its shape and M, then its largest finding
// (tensor, layout, rows differing of those compared, max abs diff).
std::string observed_drift_text(const nlohmann::json& c) {
  std::ostringstream line;
  line << dims_string(c["dims"].get<Dims>()) << " M=" << c["rows"].get<std::int64_t>();
  const nlohmann::json* worst = nullptr;
  for (const auto& d : c["drift"]) {
    if (!worst || d["max_abs_diff"].get<double>() > (*worst)["max_abs_diff"].get<double>())
      worst = &d;
  }
  if (worst) {
    line << ": " << (*worst)["tensor"].get<std::string>() << " in "
         << (*worst)["layout"].get<std::string>() << ", "
         << (*worst)["rows_differing"].get<std::int64_t>() << " rows differ, max abs diff "
         << printf_number("%.3g", (*worst)["max_abs_diff"].get<double>());
    const std::string kernels = finding_kernels_text(
        c, worst->value("layout", std::string()), worst->value("reference_layout", std::string()));
    if (!kernels.empty()) line << " (" << kernels << ")";
  }
  return line.str();
}

// Library defaults (PyTorch's calls, cuBLASLt's heuristic) are observed, not judged: per
// (impl, dtype, pass) group, how many cases drifted, and where.
std::string observations_markdown(const nlohmann::json& report) {
  const auto& summary = report["summary"];
  if (!summary.contains("observations") || summary["observations"].empty()) return "";
  constexpr std::size_t shown = 6;
  std::ostringstream out;
  out << "\n## Library defaults (observed)\n\nWhether a library's own path drifts depends on the "
         "GPU, the shape and the library version: what it did here, never a failure.\n\n"
         "| op | impl | dtype | pass | drifted / cases | where it drifted |\n"
         "|---|---|---|---|---|---|\n";
  for (const auto& g : summary["observations"]) {
    std::vector<std::string> where;
    for (const auto& c : report["results"]) {
      if (!c.value("observation", false) || c["verdict"] != "drift" || c["op"] != g["op"] ||
          c["impl"] != g["impl"] || c["dtype"] != g["dtype"] || c["pass"] != g["pass"])
        continue;
      where.push_back(observed_drift_text(c));
    }
    std::string text;
    for (std::size_t i = 0; i < where.size() && i < shown; ++i) text += (i ? "; " : "") + where[i];
    if (where.size() > shown) text += "; and " + std::to_string(where.size() - shown) + " more";
    out << "| " << g["op"].get<std::string>() << " | " << g["impl"].get<std::string>() << " | "
        << g["dtype"].get<std::string>() << " | " << g["pass"].get<std::string>() << " | "
        << g["drifted"] << " / " << g["cases"] << " | " << (text.empty() ? "held" : text) << " |\n";
  }
  return out.str();
}

}  // namespace

std::string finding_kernels_text(const nlohmann::json& case_entry, const std::string& layout,
                                 const std::string& reference_layout) {
  if (!case_entry.contains("kernels")) return "";
  const nlohmann::json& kernels = case_entry["kernels"];
  const std::string ran = layout_kernel_names(kernels, layout);
  const std::string reference_ran = layout_kernel_names(kernels, reference_layout);
  if (ran.empty() && reference_ran.empty()) return "";
  auto side = [](const std::string& name, const std::string& names) {
    return name + " ran " + (names.empty() ? std::string("no kernel recorded") : names);
  };
  return "kernels: " + side(reference_layout, reference_ran) + "; " + side(layout, ran);
}

std::string matrix_cell_text(const nlohmann::json& matrix, const std::string& op,
                             const std::string& dtype, const std::string& pass) {
  return cell_text(cell_of(matrix, op, dtype, pass));
}

std::string render_matrix_markdown(const nlohmann::json& report) {
  const auto& matrix = report["status_matrix"];
  const auto& meta = report["meta"];
  std::ostringstream out;
  out << "# bitcheck status matrix\n\n";
  if (meta.contains("shards")) {
    out << "- merged from " << meta["shards"].size() << " shards; shard 0 ran `"
        << meta.value("command_line", "")
        << "` (the others differ only in --shard and --report-name)\n";
  } else {
    out << "- command: `" << meta.value("command_line", "") << "`\n";
  }
  out << "- started: " << meta.value("started_at", "") << ", git " << meta.value("git_revision", "")
      << "\n";
  if (meta.contains("cuda") && meta["cuda"].value("device_available", false)) {
    const auto& cuda = meta["cuda"];
    out << "- device: " << cuda.value("gpu_name", "") << " (" << cuda.value("sm_count", 0)
        << " SMs, " << cuda.value("compute_capability", "") << "), driver "
        << cuda.value("driver_version", 0) << ", CUDA runtime "
        << cuda.value("cuda_runtime_version", 0) << ", cuBLASLt "
        << cuda.value("cublaslt_version", 0) << "\n";
  }
  out << "- cases: " << report["summary"]["cases"] << "; first failing op: "
      << (report["summary"]["first_failing_op"].is_null()
              ? std::string("none")
              : report["summary"]["first_failing_op"].get<std::string>())
      << "\n\nCells count cases of invariant impls (controls are listed below).\n\n";
  out << "| op |";
  for (const auto& dtype : matrix["dtypes"]) {
    for (const char* pass : passes) out << " " << dtype.get<std::string>() << " " << pass << " |";
  }
  out << "\n|---|";
  for (std::size_t i = 0; i < matrix["dtypes"].size() * 2; ++i) out << "---|";
  out << "\n";
  for (const auto& op : matrix["ops"]) {
    out << "| " << op.get<std::string>() << " |";
    for (const auto& dtype : matrix["dtypes"]) {
      for (const char* pass : passes)
        out << " " << cell_text(cell_of(matrix, op, dtype, pass)) << " |";
    }
    out << "\n";
  }
  out << "\n## Controls (must drift)\n\n| op | impl | dtype | pass | drifted / cases "
         "|\n|---|---|---|---|---|\n";
  for (const auto& g : report["summary"]["controls"]) {
    out << "| " << g["op"].get<std::string>() << " | " << g["impl"].get<std::string>() << " | "
        << g["dtype"].get<std::string>() << " | " << g["pass"].get<std::string>() << " | "
        << g["drifted"] << " / " << g["cases"] << (g["lost_sight"].get<bool>() ? " LOST SIGHT" : "")
        << (g.contains("no_chance_needs_rows")
                ? " no chance (needs batch " + g["no_chance_needs_rows"].dump() + ")"
                : "")
        << " |\n";
  }
  out << observations_markdown(report);
  std::ostringstream failures;
  for (const auto& c : report["results"]) {
    std::string verdict = c["verdict"].get<std::string>();
    if (c.value("control", false) || verdict == "pass" || verdict == "skipped") continue;
    failures << "- `" << c["id"].get<std::string>() << "`: **" << verdict << "**\n  ";
    std::string text = finding_text(c);
    for (char ch : text) failures << (ch == '\n' ? std::string("\n  ") : std::string(1, ch));
    failures << "\n";
  }
  if (!failures.str().empty()) out << "\n## Failing cases of invariant impls\n\n" << failures.str();
  return out.str();
}

std::string render_junit(const nlohmann::json& report) {
  std::map<std::string, std::vector<const nlohmann::json*>> suites;  // op -> cases
  for (const auto& c : report["results"]) suites[c["op"].get<std::string>()].push_back(&c);
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"bitcheck\">\n";
  for (const auto& [op, cases] : suites) {
    std::int64_t failures = 0, errors = 0, skipped = 0;
    for (const auto* c : cases) {
      std::string verdict = (*c)["verdict"].get<std::string>();
      bool control = c->value("control", false);
      if (verdict == "skipped")
        ++skipped;
      else if (verdict == "error")
        ++errors;
      else if (!control && verdict != "pass")
        ++failures;
    }
    out << "  <testsuite name=\"" << escape_html(op) << "\" tests=\"" << cases.size()
        << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
        << "\">\n";
    for (const auto* c : cases) {
      std::string verdict = (*c)["verdict"].get<std::string>();
      bool control = c->value("control", false);
      double seconds = c->contains("timings") ? (*c)["timings"].value("total_seconds", 0.0) : 0.0;
      out << "    <testcase classname=\"" << escape_html(op + "." + (*c)["impl"].get<std::string>())
          << "\" name=\"" << escape_html((*c)["id"].get<std::string>()) << "\" time=\"" << seconds
          << "\">";
      if (verdict == "skipped") {
        out << "<skipped message=\"" << escape_html(c->value("reason", "")) << "\"/>";
      } else if (verdict == "error") {
        out << "<error message=\"" << escape_html(c->value("reason", "")) << "\"/>";
      } else if (!control && verdict != "pass") {
        out << "<failure message=\"" << verdict << "\">" << escape_html(finding_text(*c))
            << "</failure>";
      } else if (control) {
        out << "<system-out>control: " << verdict << " (expected drift)</system-out>";
      }
      out << "</testcase>\n";
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return out.str();
}

}  // namespace bitcheck
