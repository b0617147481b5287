// The nightly page: one self-contained HTML file (inline CSS, SVG and script; no external fetch,
// so it works offline and from file://) that a person opens after a sweep. Header with the machine
// and verdict, what changed since the previous night (the `bitcheck diff` categories), the status
// matrix whose cells open their cases and findings with a replay command, controls and library
// defaults, the cost of invariance plotted from a bench result, and the history of several nights.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bitcheck {

struct ReportPageOptions {
  std::string report_path = "report.json";  // as the replay commands name the report
  std::vector<nlohmann::json> previous;  // earlier reports; "what changed" compares with the first
  nlohmann::json bench;                  // a `bitcheck bench` bench.json, or null
};

// Case data is embedded once as JSON (strings interned) and the case lists are built by the page's
// script when a cell is opened, so a 2,000-case nightly stays well under a megabyte.
std::string render_report_page(const nlohmann::json& report, const ReportPageOptions& options);

// Reads the page's inputs for `bitcheck matrix --format html`: the previous reports and the bench
// file, checked (BadInput names the file and field), and the report's path as seen from the page's
// folder (page_path empty: standard output, the path as given) for the replay commands.
ReportPageOptions load_report_page_options(const std::string& report_path,
                                           const std::string& page_path,
                                           const std::vector<std::string>& previous_paths,
                                           const std::string& bench_path);

// Text made safe for HTML (and XML) element content and quoted attribute values.
std::string escape_html(const std::string& text);

}  // namespace bitcheck
