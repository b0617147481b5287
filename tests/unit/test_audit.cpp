// reports/audit-elementwise-rope.md states, per op, a verdict and counts taken from committed GPU
// reports. This test recomputes every row from the report it names, so the audit cannot drift
// from the evidence: a re-run that changes a count, or a control group that loses sight, fails here
// until the audit says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string reports_dir = std::string(BITCHECK_SOURCE_DIR) + "/reports/";

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

OpEvidence evidence(const nlohmann::json& report, const std::string& op) {
  OpEvidence e;
  for (const auto& result : report.at("results")) {
    if (result.at("op") != op || result.at("backend") != "cuda") continue;
    const std::string verdict = result.at("verdict");
    if (result.value("control", false)) {
      auto& group = e.controls[result.at("impl").get<std::string>()];
      group.second += 1;
      group.first += verdict == "drift" || verdict == "nondeterministic" ? 1 : 0;
    } else if (result.at("impl") == "fixed-order") {
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
  std::ifstream audit(reports_dir + "audit-elementwise-rope.md");
  REQUIRE(audit.good());
  std::map<std::string, nlohmann::json> reports;
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
    if (!reports.count(report_name)) {
      std::ifstream file(reports_dir + "gpu/" + report_name);
      REQUIRE(file.good());
      reports[report_name] = nlohmann::json::parse(file);
    }
    const OpEvidence e = evidence(reports[report_name], op);
    ops_seen.push_back(op);

    CHECK(cells[3] == std::to_string(e.passed) + " / " + std::to_string(e.ran));
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
  for (const char* op : {"silu", "gelu_tanh", "gelu_erf", "swiglu", "residual_add", "scale", "cast", "rope"}) {
    CHECK(std::count(ops_seen.begin(), ops_seen.end(), op) == 1);
  }
}
