// Fault isolation through the binary: with the test-only crashing impl (BITCHECK_TEST_IMPLS=1)
// among normal cases, an isolated sweep records each crash as `error` naming the signal and runs
// every other case exactly as a sweep without the crasher does; without isolation the crash takes
// the whole sweep down (the control). Test impls stay out of normal listings.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

// Sets BITCHECK_TEST_IMPLS=1 for the commands run while it lives.
class TestImplsEnabled {
 public:
  TestImplsEnabled() { setenv("BITCHECK_TEST_IMPLS", "1", 1); }
  ~TestImplsEnabled() { unsetenv("BITCHECK_TEST_IMPLS"); }
  TestImplsEnabled(const TestImplsEnabled&) = delete;
  TestImplsEnabled& operator=(const TestImplsEnabled&) = delete;
};

const std::string small_sweep =
    "sweep --op matmul,rmsnorm --backend cpu --dtype bf16 --batch 1,7 --no-progress";

std::map<std::string, json> results_by_id(const json& report) {
  std::map<std::string, json> by_id;
  for (const auto& c : report["results"]) by_id[c["id"].get<std::string>()] = c;
  return by_id;
}

}  // namespace

TEST_CASE("test-only impls are registered only with BITCHECK_TEST_IMPLS=1", "[cli][isolation]") {
  TempDir dir;
  Run normal = run_bitcheck(dir, "list");
  REQUIRE(normal.exit_code == 0);
  CHECK(normal.out.find("test-crash") == std::string::npos);
  TestImplsEnabled enabled;
  Run with_tests = run_bitcheck(dir, "list");
  REQUIRE(with_tests.exit_code == 0);
  CHECK(with_tests.out.find("matmul/test-crash [cpu]") != std::string::npos);
}

TEST_CASE("an isolated sweep survives a crashing impl: only its cases are error",
          "[cli][isolation]") {
  TempDir dir;
  // The same sweep without the crasher, in process: what every other case must come out as.
  Run baseline = run_bitcheck(dir, small_sweep + " --no-isolate --out " + quote(dir / "baseline"));
  REQUIRE(baseline.exit_code == 0);
  json expected = json::parse(read_file(dir / "baseline/report.json"));
  CHECK(expected["meta"]["isolation"]["mode"] == "in process");

  TestImplsEnabled enabled;
  Run isolated = run_bitcheck(dir, small_sweep + " --isolate --out " + quote(dir / "isolated"));
  INFO(isolated.err);
  CHECK(isolated.exit_code == 3);  // README: 3 when an impl or device call failed
  json report = json::parse(read_file(dir / "isolated/report.json"));  // parses: written whole
  CHECK(report["meta"]["interrupted"] == false);
  CHECK(report["summary"]["cases"] == report["results"].size());
  CHECK(report["meta"]["isolation"]["mode"] == "worker process");

  auto actual = results_by_id(report);
  int crashed = 0, crasher_skipped = 0;
  std::int64_t previous_index = -1;
  for (const auto& c : report["results"]) {
    CHECK(c["case_index"].get<std::int64_t>() > previous_index);  // spec order kept
    previous_index = c["case_index"].get<std::int64_t>();
    if (c["impl"] != "test-crash") continue;
    INFO(c.dump());
    if (c["pass"] == "forward") {
      ++crashed;
      CHECK(c["verdict"] == "error");
      CHECK(c["reason"].get<std::string>().find("killed by signal 11 (SIGSEGV") !=
            std::string::npos);
    } else {
      ++crasher_skipped;
      CHECK(c["verdict"] == "skipped");  // no backward pass: never sent to crash
    }
  }
  CHECK(crashed == 4);
  CHECK(crasher_skipped == 4);
  CHECK(report["meta"]["isolation"]["faults"] == crashed);
  CHECK(report["meta"]["isolation"]["workers_started"] == crashed + 1);

  // Every other case ran (matmul cases before the crasher, rmsnorm cases after) with the verdict
  // and the output bits of the sweep without it.
  CHECK(report["results"].size() == expected["results"].size() + 8);
  for (const auto& c : expected["results"]) {
    const std::string id = c["id"].get<std::string>();
    INFO(id);
    REQUIRE(actual.count(id) == 1);
    CHECK(actual[id]["verdict"] == c["verdict"]);
    CHECK(actual[id].value("fingerprint", "") == c.value("fingerprint", ""));
    if (c["control"] == false) CHECK(c["verdict"] == "pass");
  }
}

TEST_CASE("without isolation the crashing impl takes the whole sweep down (control)",
          "[cli][isolation]") {
  TempDir dir;
  TestImplsEnabled enabled;
  Run in_process = run_bitcheck(dir, small_sweep + " --no-isolate --out " + quote(dir.path()));
  // Killed by SIGSEGV: the shell reports 128 + 11, or the signal itself when it exec'd the binary.
  CHECK((in_process.exit_code == 128 + SIGSEGV || in_process.exit_code == -SIGSEGV));
  CHECK_FALSE(std::filesystem::exists(dir / "report.json"));
}

TEST_CASE("an isolated sweep stopped by a signal writes a valid partial report",
          "[cli][isolation][interrupt]") {
  for (int signal_number : {SIGTERM, SIGINT}) {
    TempDir dir;
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      setpgid(0, 0);  // a job of its own, as a shell makes one: Ctrl-C goes to the whole group
      execl(binary.c_str(), binary.c_str(), "sweep", "--op", "all", "--backend", "cpu", "--isolate",
            "--no-progress", "--out", dir.path().c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // SIGINT as a terminal sends it (to the process group); SIGTERM as `kill` does (to the pid).
    if (signal_number == SIGINT) {
      kill(-child, signal_number);
    } else {
      kill(child, signal_number);
    }
    int status = 0;
    waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    json report = json::parse(read_file(dir / "report.json"));
    CHECK(report["meta"]["interrupted"] == true);
    CHECK(report["meta"]["isolation"]["mode"] == "worker process");
    CHECK(report["results"].size() > 0);
    CHECK(report["summary"]["cases"] == report["results"].size());
    // The worker is outside the signalled group: the case in flight finished, none died of it.
    CHECK(report["meta"]["isolation"]["faults"] == 0);
    for (const auto& c : report["results"])
      CHECK(c.value("reason", "").find("worker process") == std::string::npos);
  }
}

TEST_CASE("sweep --case-timeout: a hung case is error, its worker is killed, and the sweep goes on",
          "[cli][isolation][timeout]") {
  TestImplsEnabled enabled;
  setenv("BITCHECK_TEST_HANG", "1", 1);
  struct Unset {
    ~Unset() { unsetenv("BITCHECK_TEST_HANG"); }
  } unset_hang;
  TempDir dir;
  const std::string cases =
      "sweep --op matmul --impl cpu-fixed-order,test-hang --backend cpu --dtype fp32 "
      "--pass forward --batch 1,3 --no-progress --out " +
      quote(dir.path());
  const auto start = std::chrono::steady_clock::now();
  Run run = run_bitcheck(dir, cases + " --case-timeout 1.5");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  CHECK(run.exit_code == 3);  // errors
  json report = json::parse(read_file(dir / "report.json"));
  int hung = 0, passed = 0;
  for (const auto& c : report["results"]) {
    if (c["impl"] == "test-hang") {
      ++hung;
      CHECK(c["verdict"] == "error");
      CHECK_THAT(c["reason"].get<std::string>(), Catch::Contains("per-case limit of 1.5 s"));
    } else {
      passed += c["verdict"] == "pass";
    }
  }
  CHECK(hung > 0);
  CHECK(passed == static_cast<int>(report["results"].size()) - hung);
  CHECK(report["meta"]["isolation"]["faults"] == hung);
  CHECK(seconds < 1.5 * hung + 30);  // each hung case costs its limit, not forever
  // Bad values are refused, naming the flag.
  Run bad = run_bitcheck(dir, cases + " --case-timeout -1");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--case-timeout"));
}

TEST_CASE(
    "sweep --devices: a case whose worker a SIGKILL from outside ended (the OOM killer) is retried "
    "alone and keeps its result, without shards it stays an error",
    "[cli][isolation][devices]") {
  TempDir dir;
  TestImplsEnabled enabled;
  std::filesystem::create_directories(dir / "markers");
  setenv("BITCHECK_TEST_KILL_ONCE_DIR", (dir / "markers").c_str(), 1);
  const std::string sweep =
      "sweep --op matmul --impl test-killed-once,cpu-fixed-order --backend cpu --dtype bf16 "
      "--pass forward --batch 3,7 --isolate --no-progress";
  Run sharded = run_bitcheck(dir, sweep + " --devices 0,0 --out " + quote(dir / "sharded"));
  INFO(sharded.out << sharded.err);
  CHECK(sharded.exit_code == 0);
  const json report = json::parse(read_file(dir / "sharded/report.json"));
  CHECK(report["meta"]["isolation"]["retried_alone"] == 4);  // summed over the shards
  int retried = 0;
  for (const auto& [id, c] : results_by_id(report)) {
    INFO(id);
    CHECK(c["verdict"] == "pass");
    if (c["impl"] != "test-killed-once") continue;
    ++retried;
    CHECK(c["reason"].get<std::string>().find("retried alone") != std::string::npos);
    CHECK(c["reason"].get<std::string>().find("killed by signal 9 (SIGKILL") != std::string::npos);
  }
  CHECK(retried == 4);  // 2 shapes x 2 batches
  // One process, no shards: nothing to wait for, so no retry; the case is an error, as before.
  std::filesystem::remove_all(dir / "markers");
  std::filesystem::create_directories(dir / "markers");
  Run single = run_bitcheck(dir, sweep + " --out " + quote(dir / "single"));
  CHECK(single.exit_code == 3);
  const json alone = json::parse(read_file(dir / "single/report.json"));
  CHECK_FALSE(alone["meta"]["isolation"].contains("retried_alone"));
  for (const auto& c : alone["results"]) {
    if (c["impl"] == "test-killed-once") CHECK(c["verdict"] == "error");
  }
  unsetenv("BITCHECK_TEST_KILL_ONCE_DIR");
}

TEST_CASE(
    "sweep --devices --costs: a case whose last peak host memory is above what the host has "
    "available runs alone, the others beside each other",
    "[cli][isolation][devices]") {
  TempDir dir;
  const std::string sweep =
      "sweep --op matmul --impl cpu-fixed-order --backend cpu --dtype bf16 --pass forward "
      "--batch 3,7 --isolate --no-progress";
  Run first = run_bitcheck(dir, sweep + " --out " + quote(dir / "first"));
  REQUIRE(first.exit_code == 0);
  // The last run's costs, one case's peak host memory made larger than the host stand-in below.
  json costs = json::parse(read_file(dir / "first/report.json"));
  std::string heavy;
  for (auto& c : costs["results"]) {
    if (heavy.empty()) {
      heavy = c["id"].get<std::string>();
      c["timings"]["host_peak_bytes"] = 3000000000ull;
    } else {
      c["timings"]["host_peak_bytes"] = 1000000ull;
    }
  }
  std::ofstream(dir / "costs.json") << costs.dump();
  setenv("BITCHECK_TEST_AVAILABLE_HOST_BYTES", "2000000000", 1);
  Run sharded = run_bitcheck(dir, sweep + " --devices 0,0 --costs " + quote(dir / "costs.json") +
                                      " --out " + quote(dir / "sharded"));
  unsetenv("BITCHECK_TEST_AVAILABLE_HOST_BYTES");
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  const json report = json::parse(read_file(dir / "sharded/report.json"));
  CHECK(report["meta"]["isolation"]["ran_alone"] == 1);
  CHECK(report["meta"]["isolation"]["retried_alone"] == 0);
  const auto cases = results_by_id(report);
  for (const auto& [id, c] : cases) {
    INFO(id);
    CHECK(c["verdict"] == "pass");
    CHECK(c.contains("reason") == (id == heavy));
  }
  CHECK(cases.at(heavy)["reason"] ==
        "ran alone: its peak host memory in the costs report (3.0 GB) was above what the host had "
        "available (2.0 GB)");
}

TEST_CASE("sweep --costs: a host_peak_bytes that is not a whole number of bytes is bad input",
          "[cli][isolation][bad-input]") {
  TempDir dir;
  std::ofstream(dir / "costs.json")
      << R"({"results": [{"id": "x", "timings": {"total_seconds": 1, "host_peak_bytes": -3}}]})";
  Run run = run_bitcheck(dir, "sweep --op matmul --backend cpu --costs " +
                                  quote(dir / "costs.json") + " --out " + quote(dir / "out"));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("results[0].timings.host_peak_bytes") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "out/report.json"));
}
