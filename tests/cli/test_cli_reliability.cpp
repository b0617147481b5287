// Reliability through the binary: an oversized sweep is refused without --yes, and SIGTERM or
// SIGINT mid-sweep leaves a valid partial report marked interrupted (never a half-written one).
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_support.h"

using nlohmann::json;

TEST_CASE("a sweep over the case limit needs --yes", "[cli][limits]") {
  TempDir dir;
  const std::string sweep =
      "sweep --op matmul --backend cpu --batch 1,7 --no-progress --max-cases 5 --out " +
      quote(dir.path());
  Run refused = run_bitcheck(dir, sweep);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("--yes") != std::string::npos);
  CHECK(refused.err.find("expands to") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "report.json"));
  CHECK(run_bitcheck(dir, sweep + " --yes").exit_code == 0);
  CHECK(std::filesystem::exists(dir / "report.json"));
}

TEST_CASE("a signal mid-sweep writes a valid partial report marked interrupted",
          "[cli][interrupt]") {
  for (int signal_number : {SIGTERM, SIGINT}) {
    TempDir dir;
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // A sweep long enough to be interrupted: every op, every dtype, on the CPU.
      execl(binary.c_str(), binary.c_str(), "sweep", "--op", "all", "--backend", "cpu",
            "--no-progress", "--out", dir.path().c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    kill(child, signal_number);
    int status = 0;
    waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    json report = json::parse(read_file(dir / "report.json"));  // parses: whole, not half-written
    check_report_valid(dir / "report.json", report);
    CHECK(report["meta"]["interrupted"] == true);
    CHECK(report["results"].size() > 0);
    CHECK(report["summary"]["cases"] == report["results"].size());
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
    }
  }
}
