// The CLI11 app and the dispatch: declares every subcommand, parses, builds the registry, runs the
// parsed subcommand's handler and maps exceptions to exit codes.
#include "cli.h"

#include <iostream>

#include "commands.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/op.h"
#include "manifest.h"

namespace bitcheck::cli {

const Context::Command* Context::parsed() const {
  for (const Command& command : commands_) {
    if (command.subcommand->parsed()) return &command;
  }
  return nullptr;
}

void add_external_impl_options(CLI::App& command, ExternalImpls& impls) {
  command.add_option("--plugin", impls.plugins,
                     "Load impls from this C ABI plugin (include/bitcheck/plugin.h)");
  command.add_option(
      "--py-impl", impls.py_impls,
      "Run this Python function as an impl (module:function, see python/bitcheck_py)");
}

ExternalImpls with_spec_external_impls(ExternalImpls impls, const std::string& spec_path) {
  if (spec_path.empty()) return impls;
  ExternalImpls of_spec = external_impls_of_spec(spec_path);
  impls.plugins.insert(impls.plugins.end(), of_spec.plugins.begin(), of_spec.plugins.end());
  impls.py_impls.insert(impls.py_impls.end(), of_spec.py_impls.begin(), of_spec.py_impls.end());
  return impls;
}

Cli::Cli(const CommandLine& command_line)
    : app_("bitcheck: proves GPU kernels batch-invariant, bit for bit, forward and backward"),
      context_(command_line) {
  app_.set_version_flag("--version",
                        std::string("bitcheck ") + version_string() + " (" + git_revision() + ")");
  app_.require_subcommand(1);
  // In the order `bitcheck --help` lists them.
  for (auto add_command :
       {add_sweep_command, add_matrix_command, add_repro_command, add_minimize_command,
        add_diff_command, add_merge_command, add_bench_command, add_algos_command, add_list_command,
        add_contract_command, add_pins_command, add_coverage_command, add_sweep_worker_command}) {
    add_command(app_, context_);
  }
}

int Cli::run() {
  try {
    app_.parse(context_.command_line.argc, context_.command_line.argv);
  } catch (const CLI::ParseError& error) {
    int code = app_.exit(error);
    return code == 0 ? 0 : exit_bad_input;
  }

  try {
    Registry registry;
    register_all(registry);
    const Context::Command* command = context_.parsed();
    if (command) {
      // Plugins and Python impls join the registry after bitcheck's own impls.
      if (command->external) load_external_impls(registry, command->external());
      return command->handler(registry);
    }
  } catch (const BadInput& error) {
    std::cerr << "bitcheck: error: " << error.what() << "\n";
    return exit_bad_input;
  } catch (const std::exception& error) {
    std::cerr << "bitcheck: internal error: " << error.what() << "\n";
    return exit_internal;
  }
  return exit_internal;
}

}  // namespace bitcheck::cli
