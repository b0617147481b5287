// The nightly page's HTML printer: report strings are escaped wherever they land (text, attributes,
// the embedded JSON), the page fetches nothing (no http:// or https:// src or href), "what changed"
// lists regressions first, and a nightly-sized report renders within the size budget.
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/json_input.h"
#include "report/report_page.h"

using namespace bitcheck;

namespace {

const std::string hostile =
    "</script><img src=x onerror=alert(1)><a href=\"https://evil.example/\">'&";

nlohmann::json drift_finding() {
  return {{"tensor", "y"},
          {"layout", "batch"},
          {"reference_layout", "alone"},
          {"max_abs_diff", 0.015625},
          {"max_rel_diff", 0.0078125},
          {"max_ulp_distance", 1},
          {"mismatch_count", 3},
          {"compared", 64},
          {"first_mismatch",
           {{"row", 0},
            {"column", 5},
            {"expected", 0.28125},
            {"expected_bits", "0x3e90"},
            {"actual", 0.279296875},
            {"actual_bits", "0x3e8f"}}}};
}

nlohmann::json one_case(const std::string& id, const std::string& impl, const std::string& verdict,
                        bool control) {
  return {{"id", id},
          {"op", "matmul"},
          {"impl", impl},
          {"dtype", "bf16"},
          {"pass", "forward"},
          {"verdict", verdict},
          {"control", control},
          {"rows", 7},
          {"dims", {{"K", 64}, {"N", 32}}},
          {"layouts_run", {"alone", "batch"}},
          {"fingerprint", "00000000000000aa"},
          {"drift", verdict == "drift" ? nlohmann::json::array({drift_finding()})
                                       : nlohmann::json::array()}};
}

nlohmann::json report_with(const nlohmann::json& results, const std::string& status) {
  return {{"meta",
           {{"command_line", "/opt/x/bin/bitcheck sweep --out /home/someone/out " + hostile},
            {"git_revision", "abc123" + hostile},
            {"started_at", "2026-11-21T22:57:14Z"},
            {"host", hostile},
            {"cuda",
             {{"device_available", true},
              {"gpu_name", hostile},
              {"sm_count", 132},
              {"compute_capability", "sm_90"},
              {"driver_version", 13000},
              {"cuda_runtime_version", 13000},
              {"cublaslt_version", 130100}}}}},
          {"results", results},
          {"summary",
           {{"cases", results.size()},
            {"verdicts", {{status, 1}}},
            {"exit_code", status == "pass" ? 0 : 1},
            {"first_failing_op", status == "pass" ? nlohmann::json() : nlohmann::json("matmul")},
            {"harness_failures", nlohmann::json::array()},
            {"controls",
             {{{"op", "matmul"},
               {"impl", hostile},
               {"dtype", "bf16"},
               {"pass", "forward"},
               {"cases", 1},
               {"drifted", 1},
               {"lost_sight", false}}}}}},
          {"status_matrix",
           {{"ops", {"matmul"}},
            {"dtypes", {"bf16"}},
            {"cells",
             {{"matmul",
               {{"bf16", {{"forward", {{"status", status}, {"counts", {{status, 1}}}}}}}}}}}}}};
}

std::string embedded_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"bitcheck-data\">";
  const auto begin = page.find(open);
  REQUIRE(begin != std::string::npos);
  const auto end = page.find("</script>", begin);
  return page.substr(begin + open.size(), end - begin - open.size());
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Any src or href (attribute or CSS url) that leaves the page.
bool fetches_outside(const std::string& page) {
  static const std::regex outside(
      R"((src|href)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?\s*(https?:)?//|@import)",
      std::regex::icase);
  return std::regex_search(page, outside);
}

}  // namespace

TEST_CASE("escape_html escapes the five markup characters", "[page]") {
  CHECK(escape_html("<a href='x'>\"&") == "&lt;a href=&#39;x&#39;&gt;&quot;&amp;");
  CHECK(escape_html("plain text 1.0x") == "plain text 1.0x");
}

TEST_CASE("page: report strings are escaped in the markup and in the embedded JSON", "[page]") {
  const std::string id = "matmul/" + hostile + "/bf16/forward/K=64,N=32/M=7/seed=1";
  nlohmann::json results = nlohmann::json::array({one_case(id, hostile, "drift", false)});
  const std::string page = render_report_page(report_with(results, "drift"), ReportPageOptions{});

  // Exactly the page's own two script elements, no injected element or attribute.
  CHECK(count(page, "<script") == 2);
  CHECK(count(page, "</script>") == 2);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(page.find("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);
  CHECK_FALSE(fetches_outside(page));

  // The embedded JSON parses back to the exact strings.
  const std::string data_text = embedded_data(page);
  CHECK(data_text.find('<') == std::string::npos);
  const nlohmann::json data = nlohmann::json::parse(data_text);
  REQUIRE(data["cases"].size() == 1);
  CHECK(data["cases"][0][0] == id);
  CHECK(data["strings"][data["cases"][0][2].get<std::size_t>()] == hostile);
  // The first finding keeps both values' bits.
  CHECK(data["cases"][0][11][0][12] == "0x3e90");
  CHECK(data["cases"][0][11][0][14] == "0x3e8f");
}

TEST_CASE("page: header names the machine, the verdict and the command with paths shortened",
          "[page]") {
  nlohmann::json results = nlohmann::json::array(
      {one_case("matmul/a/bf16/forward/K=64,N=32/M=7/seed=1", "fixed-order", "pass", false)});
  const std::string page = render_report_page(report_with(results, "pass"), ReportPageOptions{});
  CHECK(page.find("PASS: all 1 invariant cases pass") != std::string::npos);
  CHECK(page.find("<dt>SMs</dt><dd>132</dd>") != std::string::npos);
  CHECK(page.find("13.1.0 (130100)") != std::string::npos);
  CHECK(page.find("<code>bitcheck sweep --out .../out ") != std::string::npos);
  CHECK(page.find("/home/someone") == std::string::npos);
  CHECK(page.find("id=\"cost\"") == std::string::npos);  // no bench given: no plot section
}

TEST_CASE("page: what changed lists the regression first, then fixes, with links to the cases",
          "[page]") {
  const std::string regressed = "matmul/fixed-order/bf16/forward/K=64,N=32/M=7/seed=1";
  const std::string fixed = "matmul/fixed-order/bf16/forward/K=64,N=32/M=1/seed=1";
  nlohmann::json before =
      report_with(nlohmann::json::array({one_case(fixed, "fixed-order", "drift", false),
                                         one_case(regressed, "fixed-order", "pass", false)}),
                  "drift");
  nlohmann::json after =
      report_with(nlohmann::json::array({one_case(fixed, "fixed-order", "pass", false),
                                         one_case(regressed, "fixed-order", "drift", false)}),
                  "drift");
  ReportPageOptions options;
  options.previous.push_back(before);
  const std::string page = render_report_page(after, options);
  const auto regression_at =
      page.find("<li class=\"regression\"><a class=\"case-link\" href=\"#case=" + regressed + "\"");
  const auto fixed_at =
      page.find("<li class=\"fixed\"><a class=\"case-link\" href=\"#case=" + fixed + "\"");
  REQUIRE(regression_at != std::string::npos);
  REQUIRE(fixed_at != std::string::npos);
  CHECK(regression_at < fixed_at);
  CHECK(page.find("REGRESSION") != std::string::npos);
  CHECK(page.find("id=\"history-table\"") != std::string::npos);
}

TEST_CASE(
    "page: a 2,100-case report with the GPU nightly's bench is self-contained and about 1 MB at "
    "most",
    "[page]") {
  nlohmann::json results = nlohmann::json::array();
  const char* impls[] = {"fixed-order", "cublaslt-pinned", "cublaslt-heuristic", "split-k-by-rows"};
  for (int i = 0; i < 2100; ++i) {
    const std::string impl = impls[i % 4];
    const bool control = i % 4 >= 2;
    const std::string id =
        "matmul/" + impl + "/bf16/forward/K=4096,N=4096/M=" + std::to_string(i / 4 + 1) + "/seed=1";
    results.push_back(one_case(id, impl, control ? "drift" : "pass", control));
  }
  const nlohmann::json report = report_with(results, "pass");
  ReportPageOptions options;
  options.bench = load_json_file(std::string(BITCHECK_SOURCE_DIR) + "/tests/data/bench-h200.json");
  const std::string page = render_report_page(report, options);
  CHECK(page.size() < 1100000);
  CHECK_FALSE(fetches_outside(page));
  const nlohmann::json data = nlohmann::json::parse(embedded_data(page));
  CHECK(data["cases"].size() == report["results"].size());
  // One SVG point per impl and M timed (cost_of_invariance's rows).
  std::size_t points = 0;
  for (const auto& row : options.bench["results"]) {
    if (row.value("claims_invariance", false) && row.contains("median_ms")) ++points;
  }
  CHECK(count(page, "<circle class=\"pt\"") == points);
}
