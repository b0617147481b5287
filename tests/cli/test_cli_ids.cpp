// `bitcheck sweep --ids zipf`: embedding backward on the CPU backend with real-text token ids: the
// fixed-order impl passes, the control still drifts, every case names the distribution (id and
// report field), the ids reach the kernel (other fingerprints than uniform ids), sharded runs
// draw the same ids, and repro re-runs such a case to the same bits.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

const std::string embedding_backward =
    "sweep --op embedding --pass backward --backend cpu --dtype bf16,fp32 --batch 33,1000 "
    "--no-progress ";

std::map<std::string, std::string> fingerprints(const json& report) {
  std::map<std::string, std::string> by_id;
  for (const auto& c : report["results"]) by_id[c["id"]] = c.value("fingerprint", "");
  return by_id;
}

}  // namespace

TEST_CASE("sweep --ids zipf: embedding backward passes, its control drifts, cases name the ids",
          "[cli][ids]") {
  TempDir dir, uniform_dir, sharded_dir;
  Run run = run_bitcheck(dir, embedding_backward + "--ids zipf --out " + quote(dir.path()));
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  REQUIRE_FALSE(report["results"].empty());
  int control_drifts = 0;
  for (const auto& c : report["results"]) {
    INFO(c["id"].get<std::string>());
    CHECK(c["ids"] == "zipf");
    CHECK_THAT(c["id"].get<std::string>(), Catch::EndsWith("/ids=zipf"));
    if (c["control"] == false) CHECK(c["verdict"] == "pass");
    if (c["control"] == true && c["verdict"] == "drift") ++control_drifts;
  }
  CHECK(control_drifts >= 2);  // the control drifts at M = 1000 in both dtypes at least
  CHECK_THAT(run.out, Catch::Contains("groups drifted as expected"));

  // Uniform ids are other inputs: the V = 1000 cases' outputs differ from the zipf ones.
  REQUIRE(run_bitcheck(uniform_dir,
                       embedding_backward + "--ids uniform --out " + quote(uniform_dir.path()))
              .exit_code == 0);
  const auto zipf_prints = fingerprints(report);
  int differing = 0;
  for (const auto& [id, fingerprint] :
       fingerprints(json::parse(read_file(uniform_dir / "report.json")))) {
    CHECK(id.find("ids=") == std::string::npos);
    auto zipf = zipf_prints.find(id + "/ids=zipf");
    REQUIRE(zipf != zipf_prints.end());
    if (id.find("V=1000") != std::string::npos && zipf->second != fingerprint) ++differing;
  }
  CHECK(differing > 0);

  // Shards run as child processes draw the same ids: the same cases, the same bits.
  REQUIRE(run_bitcheck(sharded_dir, embedding_backward + "--ids zipf --devices 0,0 --out " +
                                        quote(sharded_dir.path()))
              .exit_code == 0);
  CHECK(fingerprints(json::parse(read_file(sharded_dir / "report.json"))) == zipf_prints);
}

TEST_CASE("repro re-runs a zipf case to the same bits", "[cli][ids][repro]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir,
                       "sweep --op embedding --pass backward --backend cpu --dtype fp32 "
                       "--no-progress --out " +
                           quote(dir.path()))
              .exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  std::string id, fingerprint;
  for (const auto& c : report["results"]) {
    // The default spec's zipf entry (embedding-backward-zipf) at M = 4096.
    if (c.value("ids", "") == "zipf" && c["rows"] == 4096 && c["control"] == false) {
      id = c["id"];
      fingerprint = c["fingerprint"];
    }
  }
  REQUIRE_FALSE(id.empty());
  Run repro = run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " + quote(id));
  INFO(repro.out << repro.err);
  CHECK(repro.exit_code == 0);
  CHECK(repro.out.find("fingerprint: " + fingerprint + " (report: " + fingerprint +
                       ") -> same bits") != std::string::npos);
}
