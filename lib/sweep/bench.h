// `bitcheck bench`: the cost of invariance. Times every impl that has a device benchmark on the
// spec's shapes, in one run, against the op's library default (the same shape, interleaved) or,
// for memory-bound ops, against the device copy bandwidth measured in the same run.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/printer.h"
#include "core/run_settings.h"
#include "spec/spec.h"

namespace bitcheck {

struct BenchOptions {
  std::string spec_path;  // empty: the embedded default spec
  std::string contract_path;
  SweepOverrides overrides;
  RunSettings run;  // --pins (bench never writes pins back)
  std::string out_dir = "out";
  int warmup = 5;
  int repeats = 30;
  int rounds = 2;                          // interleaved rounds; the best round's median counts
  std::vector<std::string> devices;        // the rank group's GPUs, for cases at tp > 1
  Printer* printer = &terminal_printer();  // the table, progress and notes
  std::vector<std::string> argv;
};

// Writes OUT/bench.json and OUT/bench.md; returns 0, or 3 when a benchmark failed.
int run_bench(const BenchOptions& options, const Registry& registry);

}  // namespace bitcheck
