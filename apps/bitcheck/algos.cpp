// `bitcheck algos`: search cuBLASLt configurations of one GEMM shape (bit-classes, fastest per M
// bucket, pin table), or with --refine, refine a bucketed pin of the shape.
#include <cstdint>
#include <memory>
#include <string>

#include "commands.h"
#include "sweep/sweep.h"
#include "tuner/refine.h"
#include "tuner/search.h"

namespace bitcheck::cli {
namespace {

// The search's options, and the flags that only --refine reads.
struct AlgosFlags {
  AlgosOptions algos;
  bool no_interior = false;
  bool no_progress = false;
  std::string refine;
  std::int64_t scan_rows = 16384, verify_all_rows = 2048;
  const CLI::Option* budget_seconds_option = nullptr;
};

int run_refine(const AlgosFlags& flags) {
  const AlgosOptions& algos = flags.algos;
  RefineOptions refine;
  refine.request.dtype = algos.request.dtype;
  refine.request.form = algos.request.form;
  refine.request.n = algos.request.n;
  refine.request.k = algos.request.k;
  refine.request.seed = algos.request.seed;
  refine.request.scan_rows = flags.scan_rows;
  refine.request.verify_all_rows = flags.verify_all_rows;
  if (flags.budget_seconds_option->count()) {
    refine.request.budget_seconds = algos.request.budget_seconds;
  }
  refine.request.repeats = algos.request.repeats;
  refine.request.warmup = algos.request.warmup;
  refine.request.progress = !flags.no_progress;
  refine.request.base_pin_file = flags.refine;
  refine.out_dir = algos.out_dir;
  refine.pin_file = algos.pin_file;
  refine.argv = algos.argv;
  refine.environment = algos.environment;
  return run_algos_refine(refine);
}

int run(AlgosFlags& flags) {
  if (!flags.refine.empty()) return run_refine(flags);
  flags.algos.request.progress = !flags.no_progress;
  flags.algos.request.interior = !flags.no_interior;
  return run_algos(flags.algos);
}

}  // namespace

void add_algos_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<AlgosFlags>();
  AlgosRequest& request = flags->algos.request;
  flags->algos.argv = context.command_line.arguments();
  auto* command = app.add_subcommand(
      "algos",
      "Search cuBLASLt configurations of one GEMM shape: bit-classes, fastest per M bucket, pin "
      "table");
  command->add_option("--n", request.n, "N (output columns of the forward GEMM)")->required();
  command->add_option("--k", request.k, "K (the summed dimension)")->required();
  command->add_option("--dtype", request.dtype, "bf16 (default), fp16 or fp32");
  command->add_option("--form", request.form,
                      "forward (default, Y = X W^T) or input_grad (dX = dY W)");
  command
      ->add_option("--rows", request.rows,
                   "Bucket edges: M values to test, each the upper edge of its bucket "
                   "(comma-separated)")
      ->delimiter(',');
  command->add_flag("--no-interior", flags->no_interior,
                    "Time only the edges, not also one M inside each bucket");
  command->add_option("--seed", request.seed, "Seed of the random X and W");
  command->add_option("--max-candidates", request.max_candidates,
                      "Most configurations to run (default 160)");
  flags->budget_seconds_option =
      command->add_option("--budget-seconds", request.budget_seconds,
                          "Stop starting new candidates after this long (default 40)");
  command->add_option("--repeats", request.repeats, "Timed launches per full measurement (median)");
  command->add_option("--warmup", request.warmup, "Warm-up launches before timing");
  command->add_option("--out", flags->algos.out_dir,
                      "Directory for algos-<dtype>-<form>-N<n>-K<k>.json and .md");
  command->add_option("--write-pins", flags->algos.pin_file,
                      "Merge the best table into this pin directory (the key's own file, e.g. "
                      "contract/pins) or pin file");
  command->add_flag("--no-progress", flags->no_progress, "No progress line");
  command->add_option("--refine", flags->refine,
                      "Instead of searching: refine the bucketed pin for the shape in this pin "
                      "directory or file (the searched tables: apps/tuner/searched) so it "
                      "follows the heuristic's split-K-1 pick per M where that gives the table's "
                      "bits and is faster; verified row for row before --write-pins merges it");
  command->add_option("--scan-rows", flags->scan_rows,
                      "--refine: ask the heuristic at every M up to this (default 16384)");
  command->add_option(
      "--verify-all-rows", flags->verify_all_rows,
      "--refine: verify every M up to this, besides every bucket edge (default 2048)");
  context.on(command, [flags](const Registry& registry) {
    flags->algos.environment = environment_meta(registry);
    return run(*flags);
  });
}

}  // namespace bitcheck::cli
