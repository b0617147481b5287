// The nightly page (`bitcheck matrix REPORT --format html`): header, what changed, status matrix
// with drill-down, controls and library defaults, cost-of-invariance plots, history. Static parts
// are rendered here with every report string escaped; the case lists are built in the browser from
// one embedded JSON document, only for the cell or filter a reader opens.
#include "report/report_page.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/json_input.h"
#include "core/op.h"
#include "report/bench_cost.h"
#include "report/coverage.h"
#include "report/matrix_render.h"
#include "report/page_assets.h"
#include "report/report.h"
#include "report/report_diff.h"

namespace bitcheck {
namespace {

const char* const passes[] = {"forward", "backward"};

// Impls that are a library's own default path: their drift is an observation about this GPU and
// library version, not a control that must drift (chains swap one op for them: "...=impl"). A
// report marks their cases "observation"; reports written before that are known by these names.
const char* const library_default_impls[] = {"cublaslt-heuristic"};

// Findings kept per case in the page: every finding of a failing invariant case up to this many,
// the first one of a control or library default (enough to show what drifted).
constexpr std::size_t max_findings_failing = 16;
constexpr std::size_t max_findings_control = 1;
constexpr std::size_t max_listed_changes = 200;

enum class CaseKind { invariant = 0, control = 1, library_default = 2 };

bool is_library_default(const std::string& impl) {
  for (const char* name : library_default_impls) {
    const std::string suffix = std::string("=") + name;
    if (impl == name) return true;
    if (impl.size() > suffix.size() &&
        impl.compare(impl.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

CaseKind kind_of(const nlohmann::json& c) {
  if (!c.value("control", false)) return CaseKind::invariant;
  const bool library_default =
      c.value("observation", false) || is_library_default(c.value("impl", ""));
  return library_default ? CaseKind::library_default : CaseKind::control;
}

std::string str(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) return "";
  const auto& value = object[key];
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// JSON that can sit inside <script type="application/json">: no "<", ">" or "&" can close the
// element or open a comment, and invalid UTF-8 is replaced instead of throwing.
std::string json_for_script(const nlohmann::json& value) {
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string percent_encode(const std::string& text) {
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' || c == '=' ||
        c == ',') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string case_link(const std::string& id) {
  return "<a class=\"case-link\" href=\"#case=" + escape_html(percent_encode(id)) + "\">" +
         escape_html(id) + "</a>";
}

// "13000" -> "13.0 (13000)"; cuBLASLt "130100" -> "13.1.0 (130100)".
std::string cuda_version(std::int64_t v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) + " (" + std::to_string(v) +
         ")";
}
std::string cublaslt_version(std::int64_t v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100) + " (" + std::to_string(v) + ")";
}

// The command as run, with machine paths shortened: the binary by its name, absolute paths to
// ".../last-component".
std::string short_command(const nlohmann::json& meta) {
  std::vector<std::string> words;
  if (meta.contains("argv") && meta["argv"].is_array()) {
    for (const auto& w : meta["argv"])
      words.push_back(w.is_string() ? w.get<std::string>() : w.dump());
  } else {
    std::istringstream in(str(meta, "command_line"));
    for (std::string w; in >> w;) words.push_back(w);
  }
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::string w = words[i];
    const auto slash = w.find_last_of('/');
    if (i == 0 && slash != std::string::npos) {
      w = w.substr(slash + 1);
    } else if (!w.empty() && w[0] == '/' && slash != std::string::npos && slash > 0) {
      w = ".../" + w.substr(slash + 1);
    }
    out += (i ? " " : "") + w;
  }
  return out;
}

std::int64_t count_of(const nlohmann::json& verdicts, const char* verdict) {
  return verdicts.is_object() && verdicts.contains(verdict) ? verdicts[verdict].get<std::int64_t>()
                                                            : 0;
}

// "PASS: ..." or "FAIL: 2 drift, 1 inaccurate of 40 invariant cases; ...": one line.
std::pair<std::string, std::string> verdict_line(const nlohmann::json& report) {
  const auto& summary = report["summary"];
  const nlohmann::json verdicts = summary.value("verdicts", nlohmann::json::object());
  const std::int64_t exit_code = summary.value("exit_code", 0);
  std::int64_t ran = 0;
  for (const auto& [verdict, n] : verdicts.items()) {
    if (verdict != "skipped") ran += n.get<std::int64_t>();
  }
  std::string findings;
  for (const char* v : {"drift", "nondeterministic", "inaccurate", "error"}) {
    if (count_of(verdicts, v))
      findings += (findings.empty() ? "" : ", ") + std::to_string(count_of(verdicts, v)) + " " + v;
  }
  std::size_t lost = summary.contains("harness_failures") ? summary["harness_failures"].size() : 0;
  std::string line, cls;
  if (exit_code == 0) {
    cls = "pass";
    line = "PASS: all " + std::to_string(ran) + " invariant cases pass";
    if (count_of(verdicts, "skipped"))
      line += " (" + std::to_string(count_of(verdicts, "skipped")) + " skipped)";
    line += "; every control drifted as it must";
  } else {
    cls = exit_code == 3 ? "error" : "fail";
    line = (exit_code == 3 ? "ERROR: " : "FAIL: ") +
           (findings.empty() ? std::string("no failing case") : findings) + " of " +
           std::to_string(ran) + " invariant cases";
    if (summary.contains("first_failing_op") && !summary["first_failing_op"].is_null())
      line += "; first failing op " + str(summary, "first_failing_op");
    if (lost)
      line += "; " + std::to_string(lost) + " control group(s) lost their sight (did not drift)";
  }
  if (report["meta"].value("interrupted", false)) line += " (INTERRUPTED: partial report)";
  return {cls, line};
}

std::string header_section(const nlohmann::json& report) {
  const auto& meta = report["meta"];
  std::ostringstream out;
  auto [cls, line] = verdict_line(report);
  out << "<header>\n<h1>bitcheck nightly</h1>\n<p id=\"verdict\" class=\"verdict " << cls << "\">"
      << escape_html(line) << "</p>\n<dl class=\"meta\">";
  auto item = [&](const std::string& term, const std::string& value) {
    out << "<dt>" << escape_html(term) << "</dt><dd>" << escape_html(value) << "</dd>";
  };
  const nlohmann::json cuda = meta.contains("cuda") ? meta["cuda"] : nlohmann::json::object();
  if (cuda.value("device_available", false)) {
    item("Device", str(cuda, "gpu_name") + " (" + str(cuda, "compute_capability") + ")");
    item("SMs", str(cuda, "sm_count"));
    item("Driver", cuda_version(cuda.value("driver_version", std::int64_t{0})));
    item("CUDA runtime", cuda_version(cuda.value("cuda_runtime_version", std::int64_t{0})));
    item("cuBLASLt", cublaslt_version(cuda.value("cublaslt_version", std::int64_t{0})));
  } else {
    item("Device", "none: CPU backend (host " + str(meta, "host") + ")");
  }
  item("Git revision", str(meta, "git_revision"));
  item("Date", str(meta, "started_at"));
  item("Cases", str(report["summary"], "cases") +
                    (meta.contains("shards")
                         ? " (merged from " + std::to_string(meta["shards"].size()) + " shards)"
                         : ""));
  out << "<dt>Command</dt><dd><code>" << escape_html(short_command(meta)) << "</code></dd></dl>\n";
  out << "<p class=\"note\">Exit code <b>" << report["summary"].value("exit_code", 0)
      << "</b>. 0: every invariant case passed and every control drifted; 1: drift, nondeterminism "
         "or an "
         "inaccurate result in an invariant impl, or a control that lost its drift; 2: bad usage "
         "or input file; "
         "3: an internal or device error, or an interrupted sweep.</p>\n"
      << "<p><input id=\"filter\" type=\"search\" aria-label=\"filter cases\" placeholder=\"filter "
         "cases: op:matmul impl:fixed-order verdict:drift dtype:bf16 pass:forward kind:control "
         "tp:4, or any part of a case id\"> "
         "<span class=\"note\">Keys: <span class=\"kbd\">/</span> filter, arrows move in the "
         "matrix, "
         "<span class=\"kbd\">Enter</span> opens, <span class=\"kbd\">j</span>/<span "
         "class=\"kbd\">k</span> next/"
         "previous case, <span class=\"kbd\">Esc</span> closes.</span></p>\n"
      << "<nav><a href=\"#changes\">What changed</a> · <a href=\"#matrix-section\">Status "
         "matrix</a> · "
         "<a href=\"#controls\">Controls and library defaults</a> · <a href=\"#coverage\">Path "
         "coverage</a> · <a href=\"#cost\">Cost of "
         "invariance</a> · "
         "<a href=\"#history\">History</a></nav>\n</header>\n";
  return out.str();
}

std::map<std::string, CaseKind> kinds_by_id(const nlohmann::json& report) {
  std::map<std::string, CaseKind> kinds;
  for (const auto& c : report["results"]) kinds[str(c, "id")] = kind_of(c);
  return kinds;
}

// One category of the diff; long lists start folded so that the regressions stay in view.
void change_list(std::ostringstream& out, const std::string& title, const std::string& cls,
                 const std::vector<const nlohmann::json*>& entries) {
  constexpr std::size_t unfolded = 12;
  out << "<details class=\"change-group\""
      << (cls == "regression" || entries.size() <= unfolded ? " open" : "") << "><summary><b>"
      << escape_html(title) << ": " << entries.size() << "</b></summary>\n";
  if (!entries.empty()) out << "<ul class=\"changes\">";
  std::size_t shown = 0;
  for (const auto* e : entries) {
    if (++shown > max_listed_changes) {
      out << "<li class=\"note\">... " << entries.size() - max_listed_changes
          << " more (bitcheck diff --json)</li>";
      break;
    }
    out << "<li class=\"" << cls << "\">" << case_link(str(*e, "id"));
    if (e->contains("old") && e->contains("new")) {
      out << " <span>" << escape_html(str(*e, "old")) << " &rarr; " << escape_html(str(*e, "new"))
          << "</span>";
    }
    if (e->contains("old_fingerprint")) {
      out << " <span class=\"mono\">" << escape_html(str(*e, "old_fingerprint")) << " &rarr; "
          << escape_html(str(*e, "new_fingerprint")) << "</span>";
    }
    out << "</li>";
  }
  if (!entries.empty()) out << "</ul>";
  out << "</details>\n";
}

std::string changes_section(const nlohmann::json& report,
                            const std::vector<nlohmann::json>& previous) {
  std::ostringstream out;
  out << "<section id=\"changes\">\n<h2>What changed</h2>\n";
  if (previous.empty()) {
    out << "<p class=\"note\">No previous report given (--previous).</p>\n</section>\n";
    return out.str();
  }
  const ReportDiff diff = diff_reports(previous.front(), report);
  const auto& d = diff.document;
  const auto kinds = kinds_by_id(report);
  auto observation = [&](const nlohmann::json& e) {
    auto found = kinds.find(str(e, "id"));
    return found != kinds.end() && found->second == CaseKind::library_default;
  };
  std::set<std::string> listed;
  std::vector<const nlohmann::json*> regressions, fixed, verdict_changes, fingerprints,
      observations;
  for (const char* key :
       {"newly_failing", "newly_skipped", "controls_lost_drift", "control_groups_lost_drift"}) {
    for (const auto& e : d[key]) {
      regressions.push_back(&e);
      listed.insert(str(e, "id"));
    }
  }
  for (const auto& e : d["fixed"]) {
    fixed.push_back(&e);
    listed.insert(str(e, "id"));
  }
  for (const auto& e : d["verdict_changes"]) {
    if (observation(e))
      observations.push_back(&e);
    else if (!listed.count(str(e, "id")))
      verdict_changes.push_back(&e);
  }
  for (const auto& e : d["fingerprint_changed"])
    (observation(e) ? observations : fingerprints).push_back(&e);
  out << "<p>Against the report of " << escape_html(str(previous.front()["meta"], "started_at"))
      << " (git " << escape_html(str(previous.front()["meta"], "git_revision")) << "): <b class=\""
      << (diff.regression ? "bad" : "good") << "\">"
      << (diff.regression ? "REGRESSION" : "no regression") << "</b>; " << d["still_failing"].size()
      << " still failing, " << d["added"].size() << " cases added, " << d["removed"].size()
      << " removed.</p>\n";
  change_list(out, "Regressions (newly failing, newly skipped, or a control that lost its drift)",
              "regression", regressions);
  change_list(out, "Fixed", "fixed", fixed);
  change_list(out, "Other verdict changes", "verdict-change", verdict_changes);
  change_list(out, "Fingerprint changes (canonical output bits differ from the previous run)",
              "fingerprint", fingerprints);
  change_list(out, "Library defaults that changed behaviour (verdict or fingerprint)",
              "observation", observations);
  out << "</section>\n";
  return out.str();
}

std::string matrix_section(const nlohmann::json& report) {
  const auto& matrix = report["status_matrix"];
  std::ostringstream out;
  out << "<section id=\"matrix-section\">\n<h2>Status matrix</h2>\n<p class=\"note\">Cells count "
         "the cases of "
         "invariant impls; open a cell (click or Enter) for all its cases, controls and library "
         "defaults "
         "included.</p>\n<table id=\"matrix\"><thead><tr><th>op</th>";
  for (const auto& dtype : matrix["dtypes"]) {
    for (const char* pass : passes)
      out << "<th>" << escape_html(dtype.get<std::string>()) << " " << pass << "</th>";
  }
  out << "</tr></thead><tbody>\n";
  for (const auto& op_json : matrix["ops"]) {
    const std::string op = op_json.get<std::string>();
    out << "<tr><th>" << escape_html(op) << "</th>";
    for (const auto& dtype_json : matrix["dtypes"]) {
      const std::string dtype = dtype_json.get<std::string>();
      for (const char* pass : passes) {
        const auto& cells = matrix["cells"];
        const bool present =
            cells.contains(op) && cells[op].contains(dtype) && cells[op][dtype].contains(pass);
        const std::string status = present ? str(cells[op][dtype][pass], "status") : "none";
        const std::string mark = status == "pass"                          ? "\u2713 "
                                 : status == "skipped" || status == "none" ? ""
                                                                           : "\u2717 ";
        out << "<td class=\"cell st-" << escape_html(status)
            << "\"><button type=\"button\" data-op=\"" << escape_html(op) << "\" data-dtype=\""
            << escape_html(dtype) << "\" data-pass=\"" << pass << "\">" << mark
            << escape_html(matrix_cell_text(matrix, op, dtype, pass)) << "</button></td>";
      }
    }
    out << "</tr>\n";
  }
  out << "</tbody></table>\n<div id=\"cases\" hidden></div>\n</section>\n";
  return out.str();
}

std::string filter_button(const std::string& filter) {
  return "<button type=\"button\" class=\"filter-link\" data-filter=\"" + escape_html(filter) +
         "\">cases</button>";
}

// What a library default did: per group, the M where it drifted and the M where its bits held.
std::string library_default_rows(const nlohmann::json& report) {
  struct Group {
    std::string op, impl, dtype, pass;
    std::int64_t cases = 0, drifted = 0;
    std::set<std::int64_t> drift_m, held_m;
    std::map<std::string, std::int64_t> other;
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  for (const auto& c : report["results"]) {
    if (kind_of(c) != CaseKind::library_default) continue;
    const std::string verdict = str(c, "verdict");
    if (verdict == "skipped") continue;
    const std::string key =
        str(c, "op") + "|" + str(c, "impl") + "|" + str(c, "dtype") + "|" + str(c, "pass");
    if (!groups.count(key)) {
      order.push_back(key);
      groups[key] =
          Group{str(c, "op"), str(c, "impl"), str(c, "dtype"), str(c, "pass"), 0, 0, {}, {}, {}};
    }
    Group& g = groups[key];
    const std::int64_t m = c.value("rows", std::int64_t{0});
    ++g.cases;
    if (verdict == "drift" || verdict == "nondeterministic") {
      ++g.drifted;
      g.drift_m.insert(m);
    } else if (verdict == "pass") {
      g.held_m.insert(m);
    } else {
      ++g.other[verdict];
    }
  }
  auto list = [](const std::set<std::int64_t>& ms) {
    std::string text;
    for (auto m : ms) text += (text.empty() ? "" : ", ") + std::to_string(m);
    return text;
  };
  std::ostringstream out;
  for (const auto& key : order) {
    const Group& g = groups[key];
    std::string did = g.drifted
                          ? "drifted in " + std::to_string(g.drifted) + " of " +
                                std::to_string(g.cases) + " cases (M = " + list(g.drift_m) + ")"
                          : "identical bits in all " + std::to_string(g.cases) + " cases";
    if (g.drifted && !g.held_m.empty()) did += "; identical bits at M = " + list(g.held_m);
    for (const auto& [verdict, n] : g.other) did += "; " + std::to_string(n) + " " + verdict;
    out << "<tr><td>" << escape_html(g.op) << "</td><td>" << escape_html(g.impl) << "</td><td>"
        << escape_html(g.dtype) << "</td><td>" << escape_html(g.pass) << "</td><td class=\""
        << (g.drifted ? "observed-drift" : "observed-held") << "\">" << escape_html(did)
        << "</td><td>"
        << filter_button("op:" + g.op + " impl:" + g.impl + " dtype:" + g.dtype + " pass:" + g.pass)
        << "</td></tr>\n";
  }
  return out.str();
}

// A control group's cell class and word: it drifted, lost sight, or had no batch that could.
std::string control_cell_state(const nlohmann::json& group) {
  if (group.value("lost_sight", false)) return "st-drift\">LOST SIGHT ";
  if (group.contains("no_chance_needs_rows"))
    return "st-skipped\">no chance (needs batch " + str(group, "no_chance_needs_rows") + ") ";
  return "st-pass\">drifts ";
}

// One row per control (op, impl), one column per dtype and pass: drifted / cases, and whether the
// group drifted at all.
std::string controls_section(const nlohmann::json& report) {
  const auto& matrix = report["status_matrix"];
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, const nlohmann::json*>>
      rows;  // op|impl -> dtype pass
  const nlohmann::json controls = report["summary"].value("controls", nlohmann::json::array());
  for (const auto& g : controls) {
    if (is_library_default(str(g, "impl"))) continue;
    const std::string key = str(g, "op") + "|" + str(g, "impl");
    if (!rows.count(key)) order.push_back(key);
    rows[key][str(g, "dtype") + " " + str(g, "pass")] = &g;
  }
  std::ostringstream out;
  out << "<section id=\"controls\">\n<h2>Controls and library defaults</h2>\n<h3>Controls (must "
         "drift)</h3>\n<p class=\"note\">Each control is built to drift; a group that does not "
         "means "
         "the harness lost its sight, a failure of the run. Cells: drifted / cases.</p>\n<table "
         "id=\"controls-table\"><thead><tr><th>op</th><th>impl</th>";
  for (const auto& dtype : matrix["dtypes"]) {
    for (const char* pass : passes) {
      out << "<th>" << escape_html(dtype.get<std::string>()) << " " << pass << "</th>";
    }
  }
  out << "<th></th></tr></thead><tbody>\n";
  for (const auto& key : order) {
    const auto bar = key.find('|');
    const std::string op = key.substr(0, bar), impl = key.substr(bar + 1);
    out << "<tr><td>" << escape_html(op) << "</td><td>" << escape_html(impl) << "</td>";
    for (const auto& dtype : matrix["dtypes"]) {
      for (const char* pass : passes) {
        auto found = rows[key].find(dtype.get<std::string>() + " " + pass);
        if (found == rows[key].end()) {
          out << "<td>-</td>";
          continue;
        }
        const nlohmann::json& g = *found->second;
        out << "<td class=\"" << control_cell_state(g) << escape_html(str(g, "drifted")) << " / "
            << escape_html(str(g, "cases")) << "</td>";
      }
    }
    out << "<td>" << filter_button("op:" + op + " impl:" + impl) << "</td></tr>\n";
  }
  out << "</tbody></table>\n<h3>Library defaults (observations)</h3>\n<p class=\"note\">Whether "
         "the library's own path drifts depends on the GPU, the shape and the library version: "
         "what it did here, never a failure.</p>\n<table id=\"observations-table\"><thead><tr>"
         "<th>op</th><th>impl</th><th>dtype</th><th>pass</th><th>what it did</th><th></th></tr>"
         "</thead><tbody>\n"
      << library_default_rows(report) << "</tbody></table>\n</section>\n";
  return out.str();
}

const char* const plot_colors[] = {"#1565c0", "#c62828", "#2e7d32",
                                   "#6a1b9a", "#ef6c00", "#00838f"};

// One SVG per op, dtype, pass and shape: each impl's cost against M on a log axis, the 1.0 line.
std::string cost_plot(const std::string& title, const std::vector<const nlohmann::json*>& series) {
  // The legend sits between the title and the plot area, one line per impl.
  const double legend = 14 * double(series.size());
  const double width = 520, height = 220 + legend, left = 48, right = 16, top = 26 + legend,
               bottom = 34;
  double min_m = 1e300, max_m = 0, min_cost = 0.9, max_cost = 1.1;
  std::set<std::int64_t> all_m;
  for (const auto* s : series) {
    for (const auto& p : (*s)["per_rows"]) {
      const double m = p["rows"].get<double>(), cost = p["cost"].get<double>();
      all_m.insert(p["rows"].get<std::int64_t>());
      min_m = std::min(min_m, m);
      max_m = std::max(max_m, m);
      min_cost = std::min(min_cost, cost - 0.05);
      max_cost = std::max(max_cost, cost + 0.05);
    }
  }
  double lo = std::log10(std::max(min_m, 1.0)), hi = std::log10(std::max(max_m, 1.0));
  if (hi - lo < 0.5) {
    lo -= 0.5;
    hi += 0.5;
  } else {
    const double pad = (hi - lo) * 0.06;
    lo -= pad;
    hi += pad;
  }
  auto x = [&](double m) {
    return left + (std::log10(m) - lo) / (hi - lo) * (width - left - right);
  };
  auto y = [&](double cost) {
    return top + (max_cost - cost) / (max_cost - min_cost) * (height - top - bottom);
  };
  std::ostringstream out;
  out << "<svg class=\"plot\" role=\"img\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\"><title>" << escape_html(title)
      << "</title>";
  out << "<text x=\"" << left << "\" y=\"14\">" << escape_html(title) << "</text>";
  const double step = max_cost - min_cost > 1.5 ? 0.5 : max_cost - min_cost > 0.6 ? 0.2 : 0.1;
  for (double t = std::ceil(min_cost / step) * step; t <= max_cost; t += step) {
    out << "<line class=\"grid\" x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << y(t)
        << "\" y2=\"" << y(t) << "\"/><text x=\"" << left - 6 << "\" y=\"" << y(t) + 4
        << "\" text-anchor=\"end\">" << printf_number("%.1f", t) << "</text>";
  }
  for (auto m : all_m) {
    out << "<line class=\"grid\" x1=\"" << x(double(m)) << "\" x2=\"" << x(double(m)) << "\" y1=\""
        << top << "\" y2=\"" << height - bottom << "\"/><text x=\"" << x(double(m)) << "\" y=\""
        << height - bottom + 14 << "\" text-anchor=\"middle\">" << m << "</text>";
  }
  out << "<text x=\"" << (width + left) / 2 << "\" y=\"" << height - 4
      << "\" text-anchor=\"middle\">M (rows, log "
      << "scale)</text><line class=\"unity\" x1=\"" << left << "\" x2=\"" << width - right
      << "\" y1=\"" << y(1.0) << "\" y2=\"" << y(1.0) << "\"/><text x=\"" << width - right
      << "\" y=\"" << y(1.0) - 4 << "\" text-anchor=\"end\">1.0 = free</text>";
  std::size_t index = 0;
  for (const auto* s : series) {
    const char* color = plot_colors[index % (sizeof(plot_colors) / sizeof(plot_colors[0]))];
    const std::string impl = str(*s, "impl"), versus = str(*s, "versus");
    std::string points;
    for (const auto& p : (*s)["per_rows"]) {
      points += printf_number("%.1f", x(p["rows"].get<double>())) + "," +
                printf_number("%.1f", y(p["cost"].get<double>())) + " ";
    }
    out << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\""
        << points << "\"/>";
    for (const auto& p : (*s)["per_rows"]) {
      const std::int64_t m = p["rows"].get<std::int64_t>();
      const double cost = p["cost"].get<double>();
      out << "<circle class=\"pt\" r=\"4\" fill=\"" << color << "\" cx=\"" << x(double(m))
          << "\" cy=\"" << y(cost) << "\" data-impl=\"" << escape_html(impl) << "\" data-m=\"" << m
          << "\" data-cost=\"" << printf_number("%.4f", cost) << "\"><title>" << escape_html(impl)
          << " at M = " << m << ": " << printf_number("%.3f", cost) << "x the time of "
          << escape_html(versus) << "</title></circle>";
    }
    out << "<rect x=\"" << left << "\" y=\"" << 20 + 14 * double(index)
        << "\" width=\"10\" height=\"10\" fill=\"" << color << "\"/><text x=\"" << left + 14
        << "\" y=\"" << 29 + 14 * double(index) << "\">" << escape_html(impl) << " vs "
        << escape_html(versus) << "</text>";
    ++index;
  }
  out << "</svg>";
  return out.str();
}

// The launch paths of the invariant impls (bitcheck coverage): per path the cases that ran it, the
// cases where a layout on another path kept the bits (crossed), and crossings that drifted; the
// gaps first. Informative paths (a composite's components') are counted, not listed.
std::string coverage_section(const nlohmann::json& report) {
  std::ostringstream out;
  out << "<section id=\"coverage\">\n<h2>Launch-path coverage</h2>\n";
  if (!report.contains("paths_declared")) {
    out << "<p class=\"note\">This report records no launch paths.</p>\n</section>\n";
    return out.str();
  }
  const Coverage coverage = compute_coverage(report);
  const std::vector<std::string> gaps = coverage_gaps(coverage);
  out << "<p class=\"note\">Each impl declares the paths its kernels can take and every call "
         "records the one it took. <b>Crossed</b>: cases where a compared layout ran another path "
         "than the reference layout and the bits still matched, the evidence that the switch keeps "
         "the bits. Invariant impls only.</p>\n";
  if (gaps.empty()) {
    out << "<p class=\"verdict-line st-pass\">Every declared path of the invariant impls "
           "ran.</p>\n";
  } else {
    out << "<ul id=\"coverage-gaps\">";
    for (const auto& gap : gaps) out << "<li class=\"st-drift\">" << escape_html(gap) << "</li>";
    out << "</ul>\n";
  }
  out << "<table id=\"coverage-table\"><thead><tr><th>op/impl</th><th>path</th><th>ran</th>"
         "<th>crossed</th><th>drifted</th><th>note</th></tr></thead><tbody>\n";
  for (const auto& entry : coverage.impls) {
    if (!entry.invariant) continue;
    std::size_t informative = 0;
    for (const auto& path : entry.paths) {
      if (!path.decl.required) {
        ++informative;
        continue;
      }
      const char* status = path.cases_ran == 0      ? "st-drift"
                           : path.cases_crossed > 0 ? "st-pass"
                                                    : "";
      out << "<tr><td>" << escape_html(entry.op + "/" + entry.impl) << "</td><td>"
          << escape_html(path.decl.name) << "</td><td class=\"" << status << "\">" << path.cases_ran
          << "</td><td>" << path.cases_crossed << "</td><td>" << path.crossings_drifted
          << "</td><td>"
          << escape_html(path.decl.forced() ? "forceable (" + path.decl.forced_by + ")" : "")
          << "</td></tr>\n";
    }
    if (informative > 0) {
      out << "<tr><td>" << escape_html(entry.op + "/" + entry.impl) << "</td><td colspan=\"5\" "
          << "class=\"note\">" << informative
          << " component paths shown by bitcheck coverage --all</td></tr>\n";
    }
  }
  out << "</tbody></table>\n</section>\n";
  return out.str();
}

std::string cost_section(const nlohmann::json& bench) {
  if (bench.is_null()) return "";
  std::ostringstream out;
  out << "<section id=\"cost\">\n<h2>Cost of invariance</h2>\n<p class=\"note\">Time of each "
         "invariant impl over "
         "the library default's at the same M (matmul: cublaslt-heuristic) or, for memory-bound "
         "ops, over a device "
         "copy of the same bytes: 1.0 = free, 2.0 = twice the time. Bench: git "
      << escape_html(str(bench["meta"], "git_revision")) << ", "
      << escape_html(bench["meta"].contains("cuda") ? str(bench["meta"]["cuda"], "gpu_name") : "")
      << ".</p>\n";
  const nlohmann::json cost = cost_of_invariance(bench.value("results", nlohmann::json::array()));
  if (cost.empty()) out << "<p>No invariant impl was timed.</p>\n";
  std::vector<std::string> order;
  std::map<std::string, std::vector<const nlohmann::json*>> plots;
  for (const auto& entry : cost) {
    const std::string key = str(entry, "op") + " " + str(entry, "dtype") + " " +
                            str(entry, "pass") + " " + dims_string(entry["dims"].get<Dims>());
    if (!plots.count(key)) order.push_back(key);
    plots[key].push_back(&entry);
  }
  out << "<div class=\"plots\">\n";
  for (const auto& key : order) {
    const auto& series = plots[key];
    std::set<std::int64_t> all_m;
    for (const auto* s : series) {
      for (const auto& p : (*s)["per_rows"]) all_m.insert(p["rows"].get<std::int64_t>());
    }
    out << "<div class=\"plot-box\" data-plot=\"" << escape_html(key) << "\">"
        << cost_plot(key, series)
        << "\n<table class=\"cost-table\"><thead><tr><th>impl</th><th>versus</th>";
    for (auto m : all_m) out << "<th>M = " << m << "</th>";
    out << "<th>geomean</th></tr></thead><tbody>";
    for (const auto* s : series) {
      std::map<std::int64_t, double> by_m;
      for (const auto& p : (*s)["per_rows"])
        by_m[p["rows"].get<std::int64_t>()] = p["cost"].get<double>();
      out << "<tr><td>" << escape_html(str(*s, "impl")) << "</td><td>"
          << escape_html(str(*s, "versus")) << "</td>";
      for (auto m : all_m) {
        out << "<td>" << (by_m.count(m) ? printf_number("%.2fx", by_m[m]) : std::string("-"))
            << "</td>";
      }
      out << "<td>" << printf_number("%.2fx", (*s)["geomean_cost"].get<double>()) << "</td></tr>";
    }
    out << "</tbody></table></div>\n";
  }
  out << "</div>\n</section>\n";
  return out.str();
}

// Pass and finding counts per night (oldest first) and how many fingerprints moved since the night
// before, by the same diff as `bitcheck diff`.
std::string history_section(const nlohmann::json& report,
                            const std::vector<nlohmann::json>& previous) {
  if (previous.empty()) return "";
  std::vector<const nlohmann::json*> nights;
  for (const auto& p : previous) nights.push_back(&p);
  std::stable_sort(nights.begin(), nights.end(),
                   [](const nlohmann::json* a, const nlohmann::json* b) {
                     return str((*a)["meta"], "started_at") < str((*b)["meta"], "started_at");
                   });
  nights.push_back(&report);
  std::ostringstream out;
  out << "<section id=\"history\">\n<h2>History</h2>\n<table "
         "id=\"history-table\"><thead><tr><th>started</th>"
         "<th>git</th><th>device</th><th>cases</th><th>pass</th><th>drift</"
         "th><th>nondeterministic</th>"
         "<th>inaccurate</th><th>error</th><th>controls lost</th><th>fingerprints "
         "moved</th></tr></thead><tbody>\n";
  for (std::size_t i = 0; i < nights.size(); ++i) {
    const auto& night = *nights[i];
    const nlohmann::json verdicts = night["summary"].value("verdicts", nlohmann::json::object());
    std::string moved = "-";
    bool any_moved = false;
    if (i > 0) {
      const ReportDiff diff = diff_reports(*nights[i - 1], night);
      any_moved = !diff.document["fingerprint_changed"].empty();
      moved = std::to_string(diff.document["fingerprint_changed"].size());
    }
    const auto& meta = night["meta"];
    out << "<tr" << (i + 1 == nights.size() ? " class=\"current\"" : "") << "><td>"
        << escape_html(str(meta, "started_at")) << (i + 1 == nights.size() ? " (this report)" : "")
        << "</td><td>" << escape_html(str(meta, "git_revision")) << "</td><td>"
        << escape_html(meta.contains("cuda") && meta["cuda"].value("device_available", false)
                           ? str(meta["cuda"], "gpu_name")
                           : std::string("CPU"))
        << "</td><td>" << escape_html(str(night["summary"], "cases")) << "</td>";
    for (const char* v : {"pass", "drift", "nondeterministic", "inaccurate", "error"}) {
      const auto n = count_of(verdicts, v);
      out << "<td" << (n && std::string(v) != "pass" ? " class=\"bad\"" : "") << ">" << n
          << "</td>";
    }
    const std::size_t lost = night["summary"].contains("harness_failures")
                                 ? night["summary"]["harness_failures"].size()
                                 : 0;
    out << "<td" << (lost ? " class=\"bad\"" : "") << ">" << lost << "</td><td"
        << (any_moved ? " class=\"st-inaccurate\">moved: " : ">") << moved << "</td></tr>\n";
  }
  out << "</tbody></table>\n</section>\n";
  return out.str();
}

// With provenance: the kernels of the layouts the page's findings name (both sides of each), by
// layout: [name, grid, block, shared bytes, calls] per distinct launch; null when none.
nlohmann::json finding_kernels(const nlohmann::json& c, const nlohmann::json& findings) {
  if (!c.contains("kernels") || findings.empty()) return nullptr;
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& finding : findings) {
    if (finding[0] == "accuracy") continue;
    for (int side : {3, 2}) {  // the reference layout, then the compared one
      const std::string layout = finding[static_cast<std::size_t>(side)].get<std::string>();
      if (kernels.contains(layout) || !c["kernels"].contains(layout)) continue;
      kernels[layout] = nlohmann::json::array();
      for (const auto& use : c["kernels"][layout])
        kernels[layout].push_back(
            {use["name"], use["grid"], use["block"], use["shared_bytes"], use["calls"]});
    }
  }
  return kernels.empty() ? nlohmann::json() : kernels;
}

// The case data the script renders from: strings interned into one table, one array per case:
// [id, op, impl, dtype, pass, verdict, kind, M, shape, layouts, reason, findings, findings left
// out, the findings' kernels (finding_kernels)].
nlohmann::json page_data(const nlohmann::json& report, const ReportPageOptions& options) {
  std::vector<std::string> strings;
  std::map<std::string, std::size_t> index;
  auto intern = [&](const std::string& s) {
    auto found = index.find(s);
    if (found != index.end()) return found->second;
    index[s] = strings.size();
    strings.push_back(s);
    return strings.size() - 1;
  };
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : report["results"]) {
    const CaseKind kind = kind_of(c);
    const std::string verdict = str(c, "verdict");
    std::string layouts;
    for (const auto& l : c.contains("layouts_run") ? c["layouts_run"]
                                                   : c.value("layouts", nlohmann::json::array())) {
      layouts += (layouts.empty() ? "" : " ") + (l.is_string() ? l.get<std::string>() : l.dump());
    }
    const bool failing = kind == CaseKind::invariant && verdict != "pass" && verdict != "skipped";
    const std::size_t keep = failing ? max_findings_failing : max_findings_control;
    nlohmann::json findings = nlohmann::json::array();
    std::size_t left_out = 0;
    for (const char* list : {"nondeterminism", "drift"}) {
      if (!c.contains(list) || !c[list].is_array()) continue;
      for (const auto& f : c[list]) {
        if (findings.size() >= keep) {
          ++left_out;
          continue;
        }
        const nlohmann::json m =
            f.contains("first_mismatch") ? f["first_mismatch"] : nlohmann::json::object();
        findings.push_back(
            {list, str(f, "tensor"), str(f, "layout"), str(f, "reference_layout"),
             f.value("max_abs_diff", nlohmann::json()), f.value("max_rel_diff", nlohmann::json()),
             f.value("max_ulp_distance", nlohmann::json()),
             f.value("mismatch_count", nlohmann::json()), f.value("compared", nlohmann::json()),
             m.value("row", nlohmann::json()), m.value("column", nlohmann::json()),
             m.value("expected", nlohmann::json()), str(m, "expected_bits"),
             m.value("actual", nlohmann::json()), str(m, "actual_bits")});
      }
    }
    if (c.contains("accuracy") && c["accuracy"].is_array()) {
      for (const auto& a : c["accuracy"]) {
        if (a.value("passed", true)) continue;
        if (findings.size() >= keep) {
          ++left_out;
          continue;
        }
        findings.push_back(
            {"accuracy", str(a, "tensor"), a.value("atol", nlohmann::json()),
             a.value("rtol", nlohmann::json()), a.value("max_abs_error", nlohmann::json()),
             a.value("max_rel_error", nlohmann::json()), a.value("violations", nlohmann::json()),
             a.value("compared", nlohmann::json()), a.value("nan_count", nlohmann::json())});
      }
    }
    const nlohmann::json dims = c.contains("dims") ? c["dims"] : nlohmann::json::object();
    std::string shape;
    for (const auto& [name, value] : dims.items())
      shape += (shape.empty() ? "" : ",") + name + "=" + value.dump();
    cases.push_back({str(c, "id"), intern(str(c, "op")), intern(str(c, "impl")),
                     intern(str(c, "dtype")), intern(str(c, "pass")), intern(verdict),
                     static_cast<int>(kind), c.value("rows", nlohmann::json()), intern(shape),
                     intern(layouts), c.contains("reason") ? c["reason"] : nlohmann::json(),
                     findings.empty() ? nlohmann::json() : findings, left_out,
                     finding_kernels(c, findings)});
  }
  return {{"strings", strings}, {"cases", cases}, {"report", shell_quote(options.report_path)}};
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

ReportPageOptions load_report_page_options(const std::string& report_path,
                                           const std::string& page_path,
                                           const std::vector<std::string>& previous_paths,
                                           const std::string& bench_path) {
  ReportPageOptions options;
  options.report_path = report_path;
  if (!page_path.empty()) {
    const auto folder = std::filesystem::absolute(page_path).parent_path();
    options.report_path =
        std::filesystem::absolute(report_path).lexically_relative(folder).string();
  }
  for (const auto& path : previous_paths) {
    nlohmann::json previous = load_json_file(path);
    JsonCursor root(previous, path);
    for (const auto& c : root.at("results").items()) {
      for (const char* field : {"id", "verdict"}) c.at(field).as_string();
    }
    root.at("summary").at("verdicts").expect_object();
    root.at("meta").expect_object();
    options.previous.push_back(std::move(previous));
  }
  if (!bench_path.empty()) {
    options.bench = load_json_file(bench_path);
    JsonCursor root(options.bench, bench_path);
    for (const auto& row : root.at("results").items()) {
      for (const char* field : {"op", "impl", "dtype", "pass"}) row.at(field).as_string();
      row.at("dims").expect_object();
      row.at("rows").as_int(1, INT64_MAX);
    }
    root.at("meta").expect_object();
  }
  return options;
}

std::string render_report_page(const nlohmann::json& report, const ReportPageOptions& options) {
  std::ostringstream out;
  const auto& meta = report["meta"];
  const std::string gpu = meta.contains("cuda") && meta["cuda"].value("device_available", false)
                              ? str(meta["cuda"], "gpu_name")
                              : std::string("CPU");
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta "
         "name=\"viewport\" "
         "content=\"width=device-width, initial-scale=1\">\n<title>bitcheck: "
      << escape_html(verdict_line(report).second.substr(0, verdict_line(report).second.find(':')))
      << ", " << escape_html(gpu) << ", git " << escape_html(str(meta, "git_revision"))
      << "</title>\n<style>" << page_css() << "</style>\n</head><body>\n"
      << header_section(report) << changes_section(report, options.previous)
      << matrix_section(report) << controls_section(report) << coverage_section(report)
      << cost_section(options.bench) << history_section(report, options.previous)
      << "<script type=\"application/json\" id=\"bitcheck-data\">"
      << json_for_script(page_data(report, options)) << "</script>\n<script>" << page_script()
      << "</script>\n</body></html>\n";
  return out.str();
}

}  // namespace bitcheck
