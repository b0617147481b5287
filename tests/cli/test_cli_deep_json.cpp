// Hostile or corrupted JSON through the binary: a 100,000-level nesting is refused (exit 2, naming
// the file and the depth) by every command that reads a file, within a time and memory bound.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "cli/cli_support.h"

namespace {

constexpr int hostile_depth = 100000;

// 100,000 nested arrays, closed: a 200 KB file that is valid JSON, only far too deep.
std::string write_deep_file(const TempDir& dir, const std::string& name) {
  const std::string path = dir / name;
  std::ofstream(path) << std::string(hostile_depth, '[') << std::string(hostile_depth, ']');
  return path;
}

void check_refused_naming_depth(const Run& run, const std::string& file) {
  INFO(run.err);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains(file));
  CHECK_THAT(run.err, Catch::Contains("nested at most 64 levels deep, got 100000 levels"));
}

}  // namespace

TEST_CASE("a spec nested 100,000 levels deep is refused at once and in little memory",
          "[cli][bad-input][json]") {
  TempDir dir;
  const std::string spec = write_deep_file(dir, "deep-spec.json");
  const MeasuredRun measured =
      run_bitcheck_measured(dir, "sweep --backend cpu --no-progress --spec " + quote(spec) +
                                     " --out " + quote(dir / "out"));
  check_refused_naming_depth(measured.run, "deep-spec.json");
  // The refusal reads the file once: about 0.01 s and the binary's own ~20 MB here. The bounds
  // leave a slow, loaded CI machine a wide margin while failing the quadratic reading it replaced
  // (8,000 levels already took 0.45 s and 300 MB; 100,000 took 100 s and 18 GB).
  CHECK(measured.wall_seconds < 10.0);
  CHECK(measured.max_resident_kib < 300 * 1024);
}

TEST_CASE("contracts, pin tables and reports nested too deep are refused naming the file",
          "[cli][bad-input][json]") {
  TempDir dir;
  const std::string deep = write_deep_file(dir, "deep.json");
  for (const std::string& args :
       {"contract check --contract " + quote(deep), "pins show " + quote(deep),
        "diff " + quote(deep) + " " + quote(deep), "matrix " + quote(deep),
        "merge --out " + quote(dir / "merged.json") + " " + quote(deep),
        "repro " + quote(deep) + " --case any", "coverage " + quote(deep)}) {
    INFO(args);
    check_refused_naming_depth(run_bitcheck(dir, args), "deep.json");
  }
}
