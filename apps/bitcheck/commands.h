// The bitcheck subcommands, one file each: every add_*_command declares the subcommand's options
// on the app and leaves its handler in the context.
#pragma once

#include "cli.h"

namespace bitcheck::cli {

void add_sweep_command(CLI::App& app, Context& context);
void add_matrix_command(CLI::App& app, Context& context);
void add_repro_command(CLI::App& app, Context& context);
void add_minimize_command(CLI::App& app, Context& context);
void add_diff_command(CLI::App& app, Context& context);
void add_merge_command(CLI::App& app, Context& context);
void add_bench_command(CLI::App& app, Context& context);
void add_algos_command(CLI::App& app, Context& context);
void add_list_command(CLI::App& app, Context& context);
void add_contract_command(CLI::App& app, Context& context);
void add_pins_command(CLI::App& app, Context& context);
void add_coverage_command(CLI::App& app, Context& context);
void add_sweep_worker_command(CLI::App& app, Context& context);

}  // namespace bitcheck::cli
