// `bitcheck algos` on the command line: bad flags exit 2 naming the flag and what was expected;
// without a GPU (or without the CUDA backend) it exits 3 with the reason and writes nothing.
#include <catch2/catch.hpp>
#include <filesystem>

#include "cli/cli_support.h"

TEST_CASE("algos refuses bad flags with exit 2, naming the flag", "[cli][algos]") {
  TempDir dir;
  struct BadFlag {
    std::string args, message;
  };
  for (const BadFlag& bad : std::vector<BadFlag>{
           {"--n 0 --k 4096", "--n: expected a positive integer, got 0"},
           {"--n 4096 --k -3", "--k: expected a positive integer"},
           {"--n 4096 --k 4096 --dtype fp8", "--dtype: expected bf16, fp16 or fp32, got \"fp8\""},
           {"--n 4096 --k 4096 --form weight_grad", "--form: expected forward or input_grad"},
           {"--n 4096 --k 4096 --rows 0", "--rows: expected positive row counts"},
           {"--n 4096 --k 4096 --max-candidates 0", "--max-candidates"},
       }) {
    Run run = run_bitcheck(dir, "algos " + bad.args + " --out " + quote(dir / "out"));
    INFO(bad.args << " -> " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find(bad.message) != std::string::npos);
  }
  CHECK(run_bitcheck(dir, "algos --k 4096").exit_code == 2);  // --n is required
  CHECK(run_bitcheck(dir, "algos --n x --k 4096").exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
}

TEST_CASE("algos without a GPU exits 3 with the reason and writes no report or pins",
          "[cli][algos]") {
  TempDir dir;
  Run run =
      run_bitcheck(dir,
                   "algos --n 256 --k 256 --rows "
                   "1,17,33,49,65,97,129,193,257,321,385,513,769,1025,2049,4097 --budget-seconds 5 "
                   "--no-progress --out " +
                       quote(dir / "out") + " --write-pins " + quote(dir / "pins.json"));
  INFO(run.out << run.err);
  if (run.exit_code == 0) {  // a machine with a GPU: the search ran and wrote everything
    CHECK(std::filesystem::exists(dir / "out/algos-bf16-forward-N256-K256.json"));
    CHECK(std::filesystem::exists(dir / "out/algos-bf16-forward-N256-K256.md"));
    CHECK(std::filesystem::exists(dir / "pins.json"));
    return;
  }
  CHECK(run.exit_code == 3);
  CHECK((run.err.find("CUDA backend") != std::string::npos ||
         run.err.find("GPU") != std::string::npos || run.err.find("device") != std::string::npos));
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
  CHECK_FALSE(std::filesystem::exists(dir / "pins.json"));
}

TEST_CASE("algos --refine refuses bad flags and a missing pin file with exit 2", "[cli][algos]") {
  TempDir dir;
  const std::string pins = quote(std::filesystem::path(BITCHECK_SOURCE_DIR) / "contract/pins");
  struct BadFlag {
    std::string args, message;
  };
  for (const BadFlag& bad : std::vector<BadFlag>{
           {"--n 4096 --k 4096 --refine " + quote(dir / "none.json"),
            "none.json: (file): expected an existing pin file to refine"},
           {"--n 4096 --k 4096 --refine " + pins + " --scan-rows 0",
            "--scan-rows: expected 1 to 65536"},
           {"--n 4096 --k 4096 --refine " + pins + " --verify-all-rows 0",
            "--verify-all-rows: expected at least 1"},
           {"--n 4096 --k 4096 --refine " + pins + " --dtype fp8",
            "--dtype: expected bf16, fp16 or fp32"},
           {"--n 0 --k 4096 --refine " + pins, "--n: expected a positive integer"},
       }) {
    Run run = run_bitcheck(dir, "algos " + bad.args + " --out " + quote(dir / "out") +
                                    " --write-pins " + quote(dir / "pins.json"));
    INFO(bad.args << " -> " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find(bad.message) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
  CHECK_FALSE(std::filesystem::exists(dir / "pins.json"));
}
