// `bitcheck repro`: one case of a report re-runs to the same verdict and the same output bits
// (fingerprint), prints the command that replays it (with its --pins), dumps its tensors as .npy
// files numpy reads, and an unknown case id is bad input.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"

using nlohmann::json;

TEST_CASE("repro reproduces a drifting control's exact bits and dumps its tensors",
          "[cli][repro]") {
  TempDir dir;
  REQUIRE(run_bitcheck(
              dir, "sweep --op matmul --backend cpu --dtype bf16 --batch 1,7 --no-progress --out " +
                       quote(dir.path()))
              .exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  std::string id;
  std::string fingerprint;
  for (const auto& c : report["results"]) {
    if (c["control"] == true && c["verdict"] == "drift") {
      id = c["id"];
      fingerprint = c["fingerprint"];
      break;
    }
  }
  REQUIRE_FALSE(id.empty());
  Run repro = run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " + quote(id) +
                                    " --dump " + quote(dir / "dump"));
  CHECK(repro.exit_code == 0);
  CHECK(repro.out.find("verdict: drift (report: drift)") != std::string::npos);
  CHECK(repro.out.find("fingerprint: " + fingerprint + " (report: " + fingerprint +
                       ") -> same bits") != std::string::npos);
  CHECK(repro.out.find("replay: ") != std::string::npos);
  CHECK(repro.out.find("--pins") == std::string::npos);
  // Under a pin table of its own the re-run names it in the replay line, so pasted it runs alike.
  Run under_pins = run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " +
                                         quote(id) + " --pins " + quote(dir / "pins"));
  CHECK(under_pins.exit_code == 0);
  CHECK(under_pins.out.find(" --pins " + quote(dir / "pins") + "\n") != std::string::npos);

  json index = json::parse(read_file(dir / "dump/index.json"));
  CHECK(index["case"] == id);
  bool has_alone = false, has_reference = false;
  for (const auto& t : index["tensors"]) {
    std::string file = t["file"];
    std::string bytes = read_file(dir / ("dump/" + file));
    REQUIRE(bytes.size() > 10);
    CHECK(bytes.compare(0, 6, "\x93NUMPY") == 0);
    has_alone = has_alone || file == "output.alone.y.npy";
    has_reference = has_reference || file == "reference.y.npy";
  }
  CHECK(has_alone);
  CHECK(has_reference);
}

TEST_CASE("repro of an unknown case id exits 2", "[cli][repro][bad-input]") {
  TempDir dir;
  REQUIRE(
      run_bitcheck(
          dir, "sweep --op rmsnorm --backend cpu --dtype bf16 --batch 2,7 --no-progress --out " +
                   quote(dir.path()))
          .exit_code == 0);
  Run repro = run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case nope");
  CHECK(repro.exit_code == 2);
  CHECK(repro.err.find("$.results[*].id") != std::string::npos);
}
