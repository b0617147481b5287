// reports/audit-elementwise-rope.md states, per op, a verdict and counts taken from GPU reports.
// This test recomputes every row from the evidence of the report it names, so the audit cannot
// drift from it: a re-run that changes a count, or a control group that loses sight, fails here
// until the audit says so. The evidence is tests/data/audit/evidence.json: per report, each
// result's op, backend, impl, control flag and verdict and the summary's control groups, extracted
// from the full reports (several MB, not committed) by tests/data/audit/make-evidence.py.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string source_dir = std::string(BITCHECK_SOURCE_DIR);

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  REQUIRE(file.good());
  return nlohmann::json::parse(file);
}

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream stream(line);
  std::string cell;
  while (std::getline(stream, cell, '|')) {
    const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
    cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  // "| a | b |" splits into "", "a", "b": drop the leading empty cell.
  if (!cells.empty() && cells.front().empty()) cells.erase(cells.begin());
  return cells;
}

struct OpEvidence {
  int passed = 0, ran = 0;
  std::map<std::string, std::pair<int, int>> controls;  // impl -> (drifted, cases)
  bool lost_sight = false;
};

// One report's evidence: "fields" names the columns of each row of "results".
OpEvidence evidence(const nlohmann::json& report, const std::string& op) {
  const auto& fields = report.at("fields");
  const auto column = [&](const char* name) {
    const auto found = std::find(fields.begin(), fields.end(), name);
    REQUIRE(found != fields.end());
    return static_cast<std::size_t>(found - fields.begin());
  };
  const std::size_t op_at = column("op"), backend_at = column("backend"), impl_at = column("impl"),
                    control_at = column("control"), verdict_at = column("verdict");
  OpEvidence e;
  for (const auto& row : report.at("results")) {
    if (row.at(op_at) != op || row.at(backend_at) != "cuda") continue;
    const std::string verdict = row.at(verdict_at);
    if (row.at(control_at).get<bool>()) {
      auto& group = e.controls[row.at(impl_at).get<std::string>()];
      group.second += 1;
      group.first += verdict == "drift" || verdict == "nondeterministic" ? 1 : 0;
    } else if (row.at(impl_at) == "fixed-order") {
      e.ran += 1;
      e.passed += verdict == "pass" ? 1 : 0;
    }
  }
  for (const auto& group : report.at("summary").at("controls")) {
    if (group.at("op") == op && group.value("lost_sight", false)) e.lost_sight = true;
  }
  return e;
}

}  // namespace

TEST_CASE("the elementwise and RoPE audit matches the committed GPU reports", "[audit]") {
  std::ifstream audit(source_dir + "/reports/audit-elementwise-rope.md");
  REQUIRE(audit.good());
  const nlohmann::json reports = read_json(source_dir + "/tests/data/audit/evidence.json");
  std::vector<std::string> ops_seen;
  std::string line;
  bool in_table = false;
  while (std::getline(audit, line)) {
    if (line.rfind("| op | verdict | report |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;
    const auto cells = cells_of(line);
    REQUIRE(cells.size() == 5);
    const std::string& op = cells[0];
    const std::string& verdict = cells[1];
    const std::string& report_name = cells[2];
    INFO("audit row " << op << " from " << report_name);
    REQUIRE(reports.contains(report_name));
    const OpEvidence e = evidence(reports.at(report_name), op);
    ops_seen.push_back(op);

    CHECK(cells[3] == std::to_string(e.passed) + " / " + std::to_string(e.ran));
    // The evidence is the run whose compact form reports/ keeps (NAME-report.json is kept as
    // NAME-summary.json): same revision, and the same fixed-order verdicts by case id.
    const std::string stem = report_name.substr(0, report_name.rfind("-report.json"));
    const nlohmann::json summary = read_json(source_dir + "/reports/gpu/" + stem + "-summary.json");
    CHECK(summary.at("meta").at("git_revision") ==
          reports.at(report_name).at("meta").at("git_revision"));
    int summary_passed = 0, summary_ran = 0;
    for (const auto& c : summary.at("cases")) {
      if (c.at(0).get<std::string>().rfind(op + "/fixed-order/", 0) != 0) continue;
      summary_ran += 1;
      summary_passed += c.at(1) == "pass" ? 1 : 0;
    }
    CHECK(summary_passed == e.passed);
    CHECK(summary_ran == e.ran);
    std::string controls;
    for (const auto& [impl, counts] : e.controls) {
      if (!controls.empty()) controls += "; ";
      controls += impl + " " + std::to_string(counts.first) + "/" + std::to_string(counts.second);
    }
    CHECK(cells[4] == controls);
    const bool all_pass = e.ran > 0 && e.passed == e.ran && !e.lost_sight && !e.controls.empty();
    CHECK(verdict == (all_pass ? "pass" : "needs-fix"));
  }
  // Every elementwise op and RoPE is in the audit.
  for (const char* op :
       {"silu", "gelu_tanh", "gelu_erf", "swiglu", "residual_add", "scale", "cast", "rope"}) {
    CHECK(std::count(ops_seen.begin(), ops_seen.end(), op) == 1);
  }
}
