// `bitcheck repro`: re-run one case of a report exactly, optionally dumping its tensors.
#include "sweep/repro.h"

#include <memory>

#include "commands.h"

namespace bitcheck::cli {

void add_repro_command(CLI::App& app, Context& context) {
  auto repro = std::make_shared<ReproOptions>();
  repro->binary = context.command_line.program();
  auto* command = app.add_subcommand(
      "repro", "Re-run one case of a report exactly; --dump writes its tensors as .npy");
  command->add_option("report", repro->report_path, "Report JSON")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--case", repro->case_id, "Case id (the report's results[].id)")->required();
  command->add_option(
      "--dump", repro->dump_dir,
      "Write inputs, every layout's outputs and the reference as .npy + index.json");
  command->add_option("--contract", repro->contract_path, "Contract JSON (default: embedded)");
  command->add_option("--pins", repro->run.pins,
                      "cuBLASLt pin directory, or one pin file (default: contract/pins)");
  command->add_flag("--provenance", repro->run.provenance,
                    "Record and print the kernels each layout's calls launched (CUPTI, "
                    "torch.profiler)");
  // The plugins and Python impls the report's sweep loaded.
  context.on(
      command, [repro](const Registry& registry) { return run_repro(*repro, registry); },
      [repro] { return external_impls_of_report(repro->report_path); });
}

}  // namespace bitcheck::cli
