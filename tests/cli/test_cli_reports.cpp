// Report tooling through the binary: shards merged equal the unsharded sweep, and `matrix`
// renders markdown, HTML and JUnit from a report.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"

using nlohmann::json;

TEST_CASE("three shards merged give the unsharded report", "[cli][shard]") {
  TempDir dir;
  const std::string sweep =
      "sweep --op matmul,rmsnorm --backend cpu --batch 1,3,7 --no-progress --out " +
      quote(dir.path());
  REQUIRE(run_bitcheck(dir, sweep).exit_code == 0);
  std::string shards;
  for (int i = 0; i < 3; ++i) {
    std::string name = "shard" + std::to_string(i) + ".json";
    Run shard =
        run_bitcheck(dir, sweep + " --shard " + std::to_string(i) + "/3 --report-name " + name);
    REQUIRE(shard.exit_code == 0);
    json part = json::parse(read_file(dir / name));
    CHECK(part["results"].size() > 0);  // balanced: every shard has work
    shards += " " + quote(dir / name);
  }
  Run merge = run_bitcheck(dir, "merge --out " + quote(dir / "merged.json") + shards);
  REQUIRE(merge.exit_code == 0);
  json whole = json::parse(read_file(dir / "report.json"));
  json merged = json::parse(read_file(dir / "merged.json"));
  CHECK(results_without_timings(merged) == results_without_timings(whole));
  CHECK(merged["summary"] == whole["summary"]);
  CHECK(merged["status_matrix"] == whole["status_matrix"]);
  CHECK(merged["meta"]["shards"].size() == 3);
  for (const char* part :
       {"impl_seconds", "reference_seconds", "compare_seconds", "inputs_seconds"}) {
    CHECK(whole["meta"]["time_split"][part].get<double>() >= 0.0);
  }
  CHECK(whole["meta"]["time_split"]["impl_seconds"].get<double>() > 0.0);
  double shard_sum = 0.0;
  for (int i = 0; i < 3; ++i) {
    shard_sum += json::parse(read_file(
        dir / ("shard" + std::to_string(i) + ".json")))["meta"]["time_split"]["impl_seconds"]
                     .get<double>();
  }
  CHECK(merged["meta"]["time_split"]["impl_seconds"].get<double>() == Approx(shard_sum));
}

TEST_CASE("merging a shard twice is refused", "[cli][shard]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, "sweep --op rmsnorm --backend cpu --batch 2,7 --no-progress --out " +
                                quote(dir.path()))
              .exit_code == 0);
  Run merge = run_bitcheck(dir, "merge --out " + quote(dir / "m.json") + " " +
                                    quote(dir / "report.json") + " " + quote(dir / "report.json"));
  CHECK(merge.exit_code == 2);
  CHECK(merge.err.find("in two shards") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "m.json"));
}

TEST_CASE("matrix renders markdown, the HTML page and JUnit from a report", "[cli][matrix]") {
  TempDir dir;
  REQUIRE(run_bitcheck(
              dir, "sweep --op matmul --backend cpu --batch 1,7 --dtype bf16 --no-progress --out " +
                       quote(dir.path()))
              .exit_code == 0);
  const std::string report = quote(dir / "report.json");

  Run markdown = run_bitcheck(dir, "matrix " + report);
  REQUIRE(markdown.exit_code == 0);
  CHECK(markdown.out.find("| matmul | pass") != std::string::npos);
  CHECK(markdown.out.find("cpu-split-k-by-rows") != std::string::npos);  // the controls table

  REQUIRE(run_bitcheck(dir, "matrix " + report + " --format html --out " + quote(dir / "m.html"))
              .exit_code == 0);
  std::string html = read_file(dir / "m.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<td class=\"cell st-pass\"") != std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
  // The replay commands name the report as seen from the page's folder.
  CHECK(html.find("\"report\":\"'report.json'\"") != std::string::npos);

  // The page with what changed (against itself: nothing), history and the cost plots of a bench.
  const std::string bench = quote(source_dir + "/tests/data/bench-h200.json");
  REQUIRE(run_bitcheck(dir, "matrix " + report + " --format html --previous " + report +
                                " --bench " + bench + " --out " + quote(dir / "page.html"))
              .exit_code == 0);
  html = read_file(dir / "page.html");
  CHECK(html.find(
            "Regressions (newly failing, newly skipped, or a control that lost its drift): 0") !=
        std::string::npos);
  CHECK(html.find("id=\"history-table\"") != std::string::npos);
  CHECK(html.find("<circle class=\"pt\"") != std::string::npos);

  // A bench file that is not one is bad input, named.
  std::ofstream(dir / "bad-bench.json") << "{\"results\": [{\"op\": 1}]}";
  Run bad = run_bitcheck(
      dir, "matrix " + report + " --format html --bench " + quote(dir / "bad-bench.json"));
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad-bench.json") != std::string::npos);

  Run junit = run_bitcheck(dir, "matrix " + report + " --format junit");
  REQUIRE(junit.exit_code == 0);
  CHECK(junit.out.find("<testsuite name=\"matmul\"") != std::string::npos);
  CHECK(junit.out.find("failures=\"0\"") != std::string::npos);
  CHECK(junit.out.find("control: drift (expected drift)") != std::string::npos);
}
