// `bitcheck pins show|diff` on the command line: a few lines per key of the committed table, a
// change between two tables (directories or files, e.g. one from `git show REV:PATH`), exit 0;
// a missing table or a file that is not a pin table exits 2 naming the file and what was expected.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "cli/cli_support.h"

namespace {

const std::string committed_pins = source_dir + "/contract/pins";
const std::string bucketed_key = "sm90-lt13.1-bf16-forward-N4096-K14336";

}  // namespace

TEST_CASE("pins show prints a line per key of the committed table", "[cli][pins]") {
  TempDir dir;
  Run run = run_bitcheck(dir, "pins show " + quote(committed_pins));
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("33 keys (5 bucketed)") != std::string::npos);
  CHECK(run.out.find(bucketed_key + ": ") != std::string::npos);
  CHECK(run.out.find(
            "sm90-lt13.1-fp32-weight_grad-N4096-K4096-T256: one configuration for every M") !=
        std::string::npos);

  run = run_bitcheck(dir, "pins show " + quote(committed_pins) + " --key " + bucketed_key);
  CHECK(run.exit_code == 0);
  CHECK(std::count(run.out.begin(), run.out.end(), '\n') == 2);
  CHECK(run.out.find(", refined") != std::string::npos);
}

TEST_CASE("pins diff summarizes a change between two tables and exits 0", "[cli][pins]") {
  TempDir dir;
  // The old side as a user gets it from git: one key's file copied out of the table.
  const std::string old_file = dir / "old.json";
  std::filesystem::copy_file(committed_pins + "/" + bucketed_key + ".json", old_file);
  nlohmann::json changed = nlohmann::json::parse(read_file(old_file));
  changed["pins"][0]["bit_class"]["fingerprint"] = "0000000000000000";
  changed["pins"][0]["buckets"].erase(changed["pins"][0]["buckets"].size() - 1);
  changed["pins"][0]["buckets"].back().erase("max_rows");
  std::ofstream(dir / "new.json") << changed.dump(1);

  Run run = run_bitcheck(dir, "pins diff " + quote(old_file) + " " + quote(dir / "new.json"));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("changed " + bucketed_key + ": class ") != std::string::npos);
  CHECK(run.out.find("-> 0000000000000000") != std::string::npos);
  CHECK(run.out.find("0 keys unchanged") != std::string::npos);

  // A table against one of its keys: the others are reported removed.
  run = run_bitcheck(dir, "pins diff " + quote(committed_pins) + " " + quote(old_file));
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("1 key unchanged") != std::string::npos);
  CHECK(run.out.find("removed sm90-lt13.1-bf16-forward-N4096-K4096") != std::string::npos);
}

TEST_CASE("pins show and diff refuse a bad table with exit 2, naming the file", "[cli][pins]") {
  TempDir dir;
  const std::string report = dir / "not-pins.json";
  std::ofstream(report) << R"({"schema_version": 1, "results": []})";
  Run run = run_bitcheck(dir, "pins show " + quote(report));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("not-pins.json") != std::string::npos);
  CHECK(run.err.find("pins") != std::string::npos);

  run = run_bitcheck(dir, "pins diff " + quote(committed_pins) + " " + quote(dir / "none"));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("none") != std::string::npos);
  CHECK(run.err.find("expected a pin table") != std::string::npos);

  CHECK(run_bitcheck(dir, "pins diff " + quote(committed_pins)).exit_code == 2);  // NEW is required
  CHECK(run_bitcheck(dir, "pins").exit_code == 2);                                // show or diff
}
