// `bitcheck bench`: time device impls against the library default (or copy bandwidth) in one run.
#include "sweep/bench.h"

#include <memory>
#include <string>

#include "commands.h"
#include "core/backend.h"

namespace bitcheck::cli {
namespace {

struct BenchFlags {
  BenchOptions bench;
  std::string pin_file = "contract/pins";
};

int run(const BenchFlags& flags, const Registry& registry) {
  configure_device_backends(registry, {flags.pin_file, false});
  return run_bench(flags.bench, registry);
}

}  // namespace

void add_bench_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<BenchFlags>();
  BenchOptions& bench = flags->bench;
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
  command->add_option("--pins", flags->pin_file,
                      "cuBLASLt pin directory, or one pin file (default: contract/pins)");
  auto external = std::make_shared<ExternalImpls>();
  add_external_impl_options(*command, *external);
  context.on(
      command, [flags](const Registry& registry) { return run(*flags, registry); },
      [external, flags] { return with_spec_external_impls(*external, flags->bench.spec_path); });
}

}  // namespace bitcheck::cli
