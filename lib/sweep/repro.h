// `bitcheck repro REPORT --case ID`: re-runs one case of a report exactly (op, impl, dtype, pass,
// shape, batch, seed, layouts, repeats), checks that the canonical output bits reproduce (same
// fingerprint), prints the command that replays it, and optionally dumps every tensor as .npy.
#pragma once
#include <string>

#include "core/op.h"
#include "core/printer.h"
#include "core/run_settings.h"

namespace bitcheck {

// Quotes a word for a POSIX shell, so a printed command can be pasted back.
std::string shell_quote(const std::string& text);
// The `bitcheck repro` command line that replays case `case_id` of the report at `report_path`
// under the same run settings (--pins when not the default).
std::string repro_command(const std::string& binary, const std::string& report_path,
                          const std::string& case_id, const RunSettings& run);

struct ReproOptions {
  std::string report_path;
  std::string case_id;
  std::string dump_dir;  // empty: no dump
  std::string contract_path;
  RunSettings run;  // --pins (a repro never writes pins back)
  std::string binary = "bitcheck";
  Printer* printer = &terminal_printer();  // what the re-run showed
};

// Returns 0 when the case reproduced its recorded verdict and fingerprint, 1 when it did not,
// BadInput (exit 2) for an unknown case or a malformed report.
int run_repro(const ReproOptions& options, const Registry& registry);

// Writes a tensor as a NumPy .npy file: float dtypes as '<f4' (exact for bf16/fp16), i32 as '<i4'.
void write_npy(const std::string& path, const Tensor& tensor);

}  // namespace bitcheck
