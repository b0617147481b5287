// Fault isolation and the device-memory limit on a GPU. A sweep through the bitcheck binary with
// the test-only faulting CUDA impls (trap, illegal address: sticky; impossible cudaMalloc: not
// sticky) ahead of normal CUDA cases: each fault is `error` with the CUDA error text and every
// normal case passes; in process (the control) the first sticky fault leaves the normal cases
// unrunnable. A case too large for any GPU is skipped with the sizes, while one that fits runs.
#include <stdlib.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "temp_dir.h"
#include "unit/case_support.h"

using namespace bitcheck;
using nlohmann::json;

namespace {

// The bitcheck binary: $BITCHECK_BINARY, or beside this test binary in a GPU bundle (bin/) or a
// build tree (apps/).
std::string bitcheck_binary() {
  if (const char* path = std::getenv("BITCHECK_BINARY")) return path;
  std::error_code ignored;
  std::filesystem::path here =
      std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path();
  for (const auto& candidate :
       {here / ".." / "bin" / "bitcheck", here / ".." / "apps" / "bitcheck"}) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "";
}

using test_support::TempDir;

// Runs `binary args` with BITCHECK_TEST_IMPLS=1; returns the exit code, logs into `log`.
int run_with_test_impls(const std::string& binary, const std::string& args,
                        const std::string& log) {
  const std::string command =
      "BITCHECK_TEST_IMPLS=1 '" + binary + "' " + args + " > '" + log + "' 2>&1";
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

json read_json(const std::string& path) {
  std::ifstream stream(path);
  std::stringstream text;
  text << stream.rdbuf();
  return json::parse(text.str());
}

const std::string fault_sweep =
    "sweep --op matmul --backend cuda --impl "
    "test-trap,test-illegal-address,test-oom,fixed-order,cublaslt-pinned "
    "--dtype bf16 --pass forward --batch 1,7 --no-progress";

}  // namespace

TEST_CASE("CUDA faults cost only their own case in an isolated sweep", "[gpu][isolation]") {
  const std::string binary = bitcheck_binary();
  REQUIRE_FALSE(binary.empty());
  TempDir dir;
  int exit_code =
      run_with_test_impls(binary, fault_sweep + " --out '" + dir / "out" + "'", dir / "log");
  INFO(binary << " log: " << std::ifstream(dir / "log").rdbuf());
  CHECK(exit_code == 3);
  json report = read_json(dir / "out/report.json");
  CHECK(report["meta"]["isolation"]["mode"] == "worker process");
  CHECK(report["summary"]["cases"] == report["results"].size());
  CHECK(report["results"].size() == 20);  // 5 impls x 2 shapes x 2 batches
  int sticky = 0, normal = 0;
  for (const auto& c : report["results"]) {
    INFO(c.dump());
    const std::string impl = c["impl"].get<std::string>();
    const std::string reason = c.value("reason", "");
    if (impl == "test-trap" || impl == "test-illegal-address" || impl == "test-oom") {
      CHECK(c["verdict"] == "error");
      if (impl == "test-trap") {
        CHECK((reason.find("cudaErrorLaunchFailure") != std::string::npos ||
               reason.find("cudaErrorIllegalInstruction") != std::string::npos));
      }
      if (impl == "test-illegal-address")
        CHECK(reason.find("cudaErrorIllegalAddress") != std::string::npos);
      if (impl == "test-oom") CHECK(reason.find("cudaErrorMemoryAllocation") != std::string::npos);
      if (impl != "test-oom") ++sticky;
    } else {
      ++normal;
      CHECK(c["verdict"] == "pass");
    }
  }
  CHECK(normal == 8);
  // Each sticky fault ended its worker; the out-of-memory error did not need to.
  CHECK(report["meta"]["isolation"]["faults"] == sticky);
  CHECK(report["meta"]["isolation"]["workers_started"] == sticky + 1);
}

TEST_CASE("in process, a sticky CUDA fault leaves the later CUDA cases unrunnable (control)",
          "[gpu][isolation]") {
  const std::string binary = bitcheck_binary();
  REQUIRE_FALSE(binary.empty());
  TempDir dir;
  run_with_test_impls(binary, fault_sweep + " --no-isolate --out '" + dir / "out" + "'",
                      dir / "log");
  INFO(std::ifstream(dir / "log").rdbuf());
  json report = read_json(dir / "out/report.json");
  CHECK(report["meta"]["isolation"]["mode"] == "in process");
  int normal = 0;
  for (const auto& c : report["results"]) {
    if (c["impl"] != "fixed-order" && c["impl"] != "cublaslt-pinned") continue;
    ++normal;
    INFO(c.dump());
    CHECK(c["verdict"] == "error");
    CHECK(c.value("reason", "").find("poisoned the CUDA context") != std::string::npos);
  }
  CHECK(normal == 8);
}

TEST_CASE("a CUDA case too large for device memory is skipped with the sizes", "[gpu][memory]") {
  for (const char* impl : {"fixed-order", "cublaslt-pinned"}) {
    INFO(impl);
    // N = K = 2^20, M = 2^16: the weight alone is 2 TiB of bf16.
    CaseSpec huge = case_support::make_case("matmul", impl, DType::bf16, Pass::forward,
                                            {{"N", 1 << 20}, {"K", 1 << 20}}, 1 << 16, 1);
    CaseResult skipped = case_support::run(huge);
    CHECK(skipped.verdict == Verdict::skipped);
    CHECK(skipped.reason.find("GiB of device memory") != std::string::npos);
    CHECK(skipped.reason.find("GiB free") != std::string::npos);
    // Control: a case that fits runs.
    CaseResult fits = case_support::run(case_support::make_case(
        "matmul", impl, DType::bf16, Pass::forward, {{"N", 256}, {"K", 256}}, 7, 1));
    INFO(case_support::describe(fits));
    CHECK(fits.verdict == Verdict::pass);
  }
}
