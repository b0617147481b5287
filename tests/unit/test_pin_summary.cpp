// `bitcheck pins show|diff` summaries (host code, every build): key names, one line per key of
// the committed table, a change between two tables in a line per key, and a file that is not a
// pin table as BadInput naming the file, the JSON path and what was expected.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>

#include "core/error.h"
#include "matmul/pin_format.h"
#include "temp_dir.h"
#include "tuner/pin_summary.h"

using namespace bitcheck;

namespace {

const std::string committed = std::string(BITCHECK_SOURCE_DIR) + "/contract/pins";

nlohmann::json config_json(int algo, int workspace) {
  return {{"algo_id", algo},
          {"describe", "algo=" + std::to_string(algo) + " workspace=" + std::to_string(workspace)},
          {"workspace_bytes", workspace}};
}

nlohmann::json bucketed(std::int64_t n, const std::vector<int>& algos,
                        const std::string& fingerprint) {
  nlohmann::json entry = {{"key",
                           {{"arch", "sm_90"},
                            {"cublaslt_version", 130100},
                            {"dtype", "bf16"},
                            {"form", "forward"},
                            {"N", n},
                            {"K", 4096}}},
                          {"configs", nlohmann::json::array()},
                          {"buckets", nlohmann::json::array()},
                          {"bit_class", {{"fingerprint", fingerprint}, {"rows", 8192}}}};
  for (std::size_t i = 0; i < algos.size(); ++i) {
    entry["configs"].push_back(config_json(algos[i], 0));
    nlohmann::json bucket = {{"min_rows", 1 + 10 * i}, {"config", i}};
    if (i + 1 < algos.size()) bucket["max_rows"] = 10 * (i + 1);
    entry["buckets"].push_back(bucket);
  }
  return entry;
}

std::string write_table(const test_support::TempDir& dir, const std::string& name,
                        const std::vector<nlohmann::json>& pins) {
  nlohmann::json document = {{"schema_version", 1}, {"pins", pins}};
  std::ofstream(dir / name) << document.dump(1);
  return dir / name;
}

}  // namespace

TEST_CASE("a pin key names its file", "[pins]") {
  nlohmann::json key = {{"arch", "sm_90"}, {"cublaslt_version", 130100},
                        {"dtype", "bf16"}, {"form", "forward"},
                        {"N", 4096},       {"K", 14336}};
  CHECK(pin_key_name(key) == "sm90-lt13.1-bf16-forward-N4096-K14336");
  key["form"] = "weight_grad";
  key["chunk_tokens"] = 256;
  key["cublaslt_version"] = 120304;
  CHECK(pin_key_name(key) == "sm90-lt12.3.4-bf16-weight_grad-N4096-K14336-T256");
}

TEST_CASE("pins show summarizes the committed table in a line per key", "[pins]") {
  const auto pins = summarize_pins(committed);
  REQUIRE(pins.size() == 33);
  const std::string text = pins_show_text(committed, pins, "");
  CHECK(text.find("33 keys (5 bucketed)") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 34);
  const std::string one = pins_show_text(committed, pins, "sm90-lt13.1-bf16-forward-N4096-K4096");
  CHECK(one.find("sm90-lt13.1-bf16-forward-N4096-K4096: 2064 buckets") != std::string::npos);
  CHECK(one.find("class d7cfe369a8b7cee5, rows verified 8192, refined") != std::string::npos);
  CHECK_THROWS_AS(pins_show_text(committed, pins, "sm90-lt13.1-bf16-forward-N1-K1"), BadInput);
}

TEST_CASE("pins diff names keys added, removed and changed, with configurations", "[pins]") {
  test_support::TempDir dir;
  const std::string before =
      write_table(dir, "before.json",
                  {bucketed(4096, {1, 2, 3}, "aaaa"), bucketed(6144, {1}, "bbbb"),
                   bucketed(8192, {5}, "cccc")});
  const std::string after =
      write_table(dir, "after.json",
                  {bucketed(4096, {1, 4, 5, 6}, "aaaa"), bucketed(6144, {1}, "bbbb"),
                   bucketed(28672, {7}, "dddd")});
  const std::string text =
      pins_diff_text(before, summarize_pins(before), after, summarize_pins(after));
  INFO(text);
  CHECK(
      text.find("changed sm90-lt13.1-bf16-forward-N4096-K4096: class aaaa (same), buckets 3 -> 4, "
                "configurations +3 -2 (1 kept), rows verified 8192") != std::string::npos);
  CHECK(
      text.find(
          "added   sm90-lt13.1-bf16-forward-N28672-K4096: 1 bucket, 1 configuration, class dddd") !=
      std::string::npos);
  CHECK(text.find("removed sm90-lt13.1-bf16-forward-N8192-K4096") != std::string::npos);
  CHECK(text.find("1 key unchanged") != std::string::npos);

  // A table against itself: nothing changed.
  const auto pins = summarize_pins(committed);
  CHECK(pins_diff_text(committed, pins, committed, pins).find("33 keys unchanged") !=
        std::string::npos);
}

TEST_CASE("a file that is not a pin table is BadInput naming the file and what was expected",
          "[pins]") {
  test_support::TempDir dir;
  nlohmann::json no_class = bucketed(4096, {1}, "aaaa");
  no_class.erase("bit_class");
  const std::string path = write_table(dir, "bad.json", {no_class});
  try {
    summarize_pins(path);
    FAIL("accepted a bucketed pin without its bit-class");
  } catch (const BadInput& error) {
    CHECK(error.file() == path);
    CHECK(error.json_path() == "$.pins[0].bit_class");
  }
  CHECK_THROWS_AS(summarize_pins(dir / "missing"), BadInput);
}
