// `bitcheck bench`: time device impls against the library default (or copy bandwidth) in one run.
#include "sweep/bench.h"

#include <memory>
#include <string>

#include "commands.h"

namespace bitcheck::cli {

void add_bench_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<BenchOptions>();
  BenchOptions& bench = *flags;
  bench.argv = context.command_line.arguments();
  auto* command = app.add_subcommand(
      "bench", "Time device impls against the library default (or copy bandwidth) in one run");
  command->add_option("--spec", bench.spec_path,
                      "Sweep spec whose shapes and batches to time (default: embedded)");
  command->add_option("--op", bench.overrides.ops, "Ops (comma-separated, or all)")->delimiter(',');
  command->add_option("--impl", bench.overrides.impls, "Only these impls (comma-separated)")
      ->delimiter(',');
  command->add_option("--dtype", bench.overrides.dtypes, "dtypes (comma-separated)")
      ->delimiter(',');
  command->add_option("--pass", bench.overrides.passes, "forward (default) and/or backward")
      ->delimiter(',');
  command->add_option("--batch", bench.overrides.batches, "Batch sizes M (comma-separated)")
      ->delimiter(',');
  command->add_option("--repeats", bench.repeats, "Timed launches per measurement (median)");
  command->add_option("--rounds", bench.rounds,
                      "Interleaved rounds per point (fastest median kept)");
  command->add_option("--out", bench.out_dir, "Directory for bench.json and bench.md");
  command
      ->add_option("--tp", bench.overrides.tps,
                   "TP sizes (1, 2, 4, 8): cases at tp > 1 are timed by a group of rank "
                   "processes, one per GPU of --devices")
      ->delimiter(',');
  command
      ->add_option("--devices", bench.devices,
                   "The GPUs of the rank group that times the cases at tp > 1 (one per rank)")
      ->delimiter(',');
  command->add_option("--pins", bench.run.pins,
                      "cuBLASLt pin directory, or one pin file (default: contract/pins)");
  auto external = std::make_shared<ExternalImpls>();
  add_external_impl_options(*command, *external);
  context.on(
      command, [flags](const Registry& registry) { return run_bench(*flags, registry); },
      [external, flags] { return with_spec_external_impls(*external, flags->spec_path); });
}

}  // namespace bitcheck::cli
