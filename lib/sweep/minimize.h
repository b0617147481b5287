// `bitcheck minimize REPORT --case ID`: shrinks a drifting case of a report (fewer layers, fewer
// rows, smaller dims, fewer layouts) while it keeps its verdict (drift or nondeterministic), in a
// bounded number of trial runs, and writes the smallest case found as a one-case report to replay.
#pragma once
#include <string>
#include <vector>

#include "core/op.h"
#include "core/printer.h"
#include "core/run_settings.h"

namespace bitcheck {

struct MinimizeOptions {
  std::string report_path;
  std::string case_id;
  std::string out_path = "out/minimized.json";  // the one-case report of the smallest case
  std::string contract_path;
  RunSettings run;  // --pins (minimize never writes pins back)
  std::string binary = "bitcheck";
  std::vector<std::string> argv;
  int max_trials = 200;  // runs of candidate cases, the re-run of the original not counted
  Printer* printer = &terminal_printer();  // each step and the minimized case
};

// Returns 0 when the case was re-run to its verdict and the smallest case found was written, 1
// when the case no longer shows its recorded verdict (nothing to minimize), BadInput (exit 2) for
// an unknown case, a case that is not drift or nondeterministic, or a malformed report.
int run_minimize(const MinimizeOptions& options, const Registry& registry);

}  // namespace bitcheck
