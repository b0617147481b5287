// The sweep driver behind `bitcheck sweep`: contract + spec -> cases -> runner -> report.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitcheck/backends.h"
#include "bitcheck/spec.h"

namespace bitcheck {

struct SweepOptions {
  std::string spec_path;      // empty: the embedded default spec
  std::string contract_path;  // empty: the embedded contract
  SweepOverrides overrides;
  std::string out_dir = "out";
  std::string report_name = "report.json";
  std::vector<std::string> argv;
  bool progress = true;  // a progress line on stderr when it is a terminal
  CudaBackendOptions cuda;
  std::size_t max_cases = 20000;  // a spec expanding to more is refused unless confirmed
  bool confirmed = false;         // --yes
};

// Host, git revision, compile flags, CUDA device and library versions.
nlohmann::json environment_meta();
std::string utc_timestamp();

// Runs the sweep and writes the report; returns the exit code (0/1/3). BadInput propagates (2).
int run_sweep(const SweepOptions& options, const Registry& registry);

Contract load_contract_or_embedded(const std::string& path, const Registry& registry);

}  // namespace bitcheck
