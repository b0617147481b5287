// `bitcheck minimize`: shrink a drifting case of a report while it still drifts.
#include "sweep/minimize.h"

#include <memory>

#include "commands.h"

namespace bitcheck::cli {

void add_minimize_command(CLI::App& app, Context& context) {
  auto minimize = std::make_shared<MinimizeOptions>();
  minimize->binary = context.command_line.program();
  minimize->argv = context.command_line.arguments();
  auto* command = app.add_subcommand(
      "minimize",
      "Shrink a drifting case of a report (layers, rows, dims, layouts) while it still drifts; "
      "prints the replay command");
  command->add_option("report", minimize->report_path, "Report JSON")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--case", minimize->case_id, "Case id of a drift or nondeterministic result")
      ->required();
  command->add_option("--out", minimize->out_path,
                      "One-case report of the smallest case found (default out/minimized.json)");
  command->add_option("--max-trials", minimize->max_trials,
                      "Most candidate cases to run (default 200)");
  command->add_option("--contract", minimize->contract_path, "Contract JSON (default: embedded)");
  command->add_option("--pins", minimize->run.pins,
                      "cuBLASLt pin directory, or one pin file (default: contract/pins)");
  // The plugins and Python impls the report's sweep loaded.
  context.on(
      command, [minimize](const Registry& registry) { return run_minimize(*minimize, registry); },
      [minimize] { return external_impls_of_report(minimize->report_path); });
}

}  // namespace bitcheck::cli
