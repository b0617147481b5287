// `bitcheck sweep`: run a sweep spec and write a report. The flags fill SweepOptions; the few that
// need checking or reading (seeds, shard, --skip-done reports) are turned into overrides here.
#include "sweep/sweep.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/special_values.h"

namespace bitcheck::cli {
namespace {

// The sweep flags that SweepOptions does not hold as given.
struct SweepFlags {
  SweepOptions sweep;
  std::vector<std::string> seeds;
  int repeats = 0;
  CLI::Option* repeats_option = nullptr;
  bool no_progress = false;
  std::string shard;
  std::vector<std::string> skip_done;
  bool isolate = false, no_isolate = false;
  bool special_values = false;
  double special_values_rate = 0;
  CLI::Option* special_rate_option = nullptr;
  std::string ids;
  CLI::Option* ids_option = nullptr;
  std::string rank;        // r/n
  std::string skip_ids;    // a file of case ids
  ExternalImpls external;  // --plugin, --py-impl
};

void declare_options(CLI::App& command, SweepFlags& flags) {
  SweepOptions& sweep = flags.sweep;
  command.add_option("--spec", sweep.spec_path,
                     "Sweep spec JSON (default: embedded sweeps/default.json)");
  command.add_option("--contract", sweep.contract_path,
                     "Contract JSON (default: embedded contract/contract.json)");
  command.add_option("--op", sweep.overrides.ops, "Ops to run: all, or names (comma-separated)")
      ->delimiter(',');
  command.add_option("--impl", sweep.overrides.impls, "Only these impls (comma-separated)")
      ->delimiter(',');
  command.add_option("--dtype", sweep.overrides.dtypes, "Override the dtypes (comma-separated)")
      ->delimiter(',');
  command.add_option("--pass", sweep.overrides.passes, "forward and/or backward")->delimiter(',');
  command.add_option("--layout", sweep.overrides.layouts, "Override the layouts (comma-separated)")
      ->delimiter(',');
  command
      .add_option("--batch", sweep.overrides.batches,
                  "Override the batch sizes M (comma-separated)")
      ->delimiter(',');
  command.add_option("--seed", flags.seeds, "Override the seeds (comma-separated)")->delimiter(',');
  flags.repeats_option = command.add_option("--repeats", flags.repeats,
                                            "Canonical runs for the determinism check (>= 2)");
  command.add_option("--backend", sweep.overrides.backend,
                     "auto (every available backend), cpu or cuda");
  command.add_option("--out", sweep.out_dir, "Directory for the report (default: out)");
  command.add_flag("--no-progress", flags.no_progress, "No progress line");
  command.add_flag("--require-coverage", sweep.require_coverage,
                   "Exit 1 when a declared launch path of an invariant impl never ran "
                   "(bitcheck coverage REPORT shows the table)");
  command.add_option("--shard", flags.shard,
                     "Run shard i of n (i/n, 0-based): a fixed share of the cases, balanced by "
                     "estimated cost (input groups kept together)");
  command.add_option("--shard-queue", sweep.overrides.shard_queue,
                     "With --shard: take units of work from the counter in this file (made by "
                     "--devices, shared by its shards: each takes the next unit, most expensive "
                     "first) instead of a fixed share");
  command
      .add_option("--skip-done", flags.skip_done,
                  "Reports (e.g. interrupted ones) whose checked cases are not run again; merge "
                  "them with this run's report afterwards")
      ->check(CLI::ExistingFile);
  command
      .add_option("--costs", sweep.costs_report,
                  "A report of an earlier run (the last night's) whose measured case times order "
                  "and balance the units of work instead of estimates (--devices, --shard)")
      ->check(CLI::ExistingFile);
  command.add_option("--report-name", sweep.report_name,
                     "File name of the report in --out (default report.json)");
  command.add_flag("--yes", sweep.confirmed,
                   "Run even when the spec expands to more than --max-cases cases");
  command.add_option("--max-cases", sweep.max_cases,
                     "Case count above which --yes is required (default 20000)");
  auto* isolate_flag =
      command.add_flag("--isolate", flags.isolate,
                       "Run the cases in a worker process, so a crash or a sticky CUDA error costs "
                       "only its own case (default when CUDA cases can run)");
  auto* no_isolate_flag =
      command.add_flag("--no-isolate", flags.no_isolate, "Run every case in this process")
          ->excludes(isolate_flag);
  command
      .add_option("--case-timeout", sweep.case_timeout_seconds,
                  "Seconds a case may run before it is `error` and its worker process is killed (a "
                  "hung kernel); implies --isolate")
      ->excludes(no_isolate_flag);
  command.add_flag("--special-values", flags.special_values,
                   "Mix NaN, +-Inf, subnormals and -0 into float row inputs (1 element in 32)");
  flags.special_rate_option = command.add_option(
      "--special-values-rate", flags.special_values_rate,
      "Special values at this rate in [0, 0.5] (0 turns off what the spec enables)");
  flags.ids_option = command.add_option(
      "--ids", flags.ids,
      "Token-id distribution of the ops with token-id inputs (embedding ids, logprob targets, the "
      "chain's): uniform, zipf (real text's 1/rank frequencies) or few (4 ids)");
  command
      .add_option("--tp", sweep.overrides.tps,
                  "TP sizes (1, 2, 4, 8) of every entry: the impls that run on several ranks get "
                  "a case at each; a case at tp > 1 is compared with its rows alone at tp = 1")
      ->delimiter(',');
  command
      .add_option(
          "--devices", sweep.devices,
          "Run one shard per listed device in parallel (child processes with CUDA_VISIBLE_DEVICES "
          "set), merged into one report; on the CPU backend only the parallelism")
      ->delimiter(',');
  // The processes of a rank group (started by --devices for cases at tp > 1; sweep/rank_group.h).
  command.add_option("--rank", flags.rank, "This process is rank r of a group of n (r/n)")
      ->group("");
  command.add_option("--rank-dir", sweep.rank_dir, "The directory the ranks meet in")->group("");
  command.add_option("--rank-cases", sweep.rank_cases, "The ids of the cases the group runs")
      ->group("");
  command.add_option("--rank-results", sweep.rank_results, "Rank 0's results, a line a case")
      ->group("");
  command
      .add_option("--skip-ids", flags.skip_ids,
                  "A file of case ids (one a line) not to run: those a rank group ran")
      ->group("");
  command.add_flag("--rank-bench", sweep.rank_bench, "The group times its cases (bench)")
      ->group("");
  command.add_option("--bench-warmup", sweep.bench.warmup, "Warm-up launches (--rank-bench)")
      ->group("");
  command.add_option("--bench-repeats", sweep.bench.repeats, "Timed launches (--rank-bench)")
      ->group("");
  command
      .add_option("--rank-launcher", sweep.rank_launcher,
                  "How --devices starts the group of ranks for cases at tp > 1: on this host (the "
                  "default), or srun: one task per rank across the Slurm allocation's nodes, "
                  "meeting in --out on a shared file system (scripts/slurm-sweep.sh --ranks)")
      ->check(CLI::IsMember({"srun"}));
  command
      .add_option("--device-slots", sweep.device_slots,
                  "With --devices: how many of the shards on one GPU may run impl calls at once "
                  "(default 0: no bound)")
      ->check(CLI::Range(0, 1024));
  command.add_option("--rank-case-timeout", sweep.rank_case_timeout_seconds,
                     "Seconds a case of a rank group may take before the group is stopped and the "
                     "case is `error` (default 900)");
  command.add_option("--pins", sweep.run.pins,
                     "cuBLASLt pin directory, or one pin file (default: contract/pins)");
  command.add_flag("--write-pins", sweep.run.write_pins,
                   "Write pins derived in this run back to the pin table");
  command.add_flag(
      "--provenance", sweep.run.provenance,
      "Record the kernels every call of a CUDA or Python impl launched (CUPTI, "
      "torch.profiler): each layout's kernels in the report, the kernel sequences of "
      "impls that declare no paths as their paths, findings naming both sides' kernels");
  add_external_impl_options(command, flags.external);
}

void parse_seeds(const std::vector<std::string>& seeds, std::vector<std::uint64_t>& values) {
  for (const auto& seed : seeds) {
    try {
      std::size_t used = 0;
      unsigned long long value = std::stoull(seed, &used);
      if (used != seed.size() || seed[0] == '-') throw std::invalid_argument(seed);
      values.push_back(value);
    } catch (const std::exception&) {
      throw BadInput("command line", "--seed", "a non-negative integer, got \"" + seed + "\"");
    }
  }
}

void parse_shard(const std::string& shard, SweepOverrides& overrides) {
  auto slash = shard.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument(shard);
    overrides.shard_index = std::stoi(shard.substr(0, slash));
    overrides.shard_count = std::stoi(shard.substr(slash + 1));
  } catch (const std::exception&) {
    throw BadInput("command line", "--shard", "i/n, e.g. 0/4, got \"" + shard + "\"");
  }
}

// A task of an srun step (--rank slurm): its rank and the group's size from Slurm, and its GPU the
// one of its node's GPUs at its local index when Slurm left it several.
void take_slurm_rank(SweepOptions& sweep) {
  const char* proc = std::getenv("SLURM_PROCID");
  const char* tasks = std::getenv("SLURM_NTASKS");
  if (!proc || !tasks)
    throw BadInput("command line", "--rank", "slurm only in a task of an srun step (SLURM_PROCID)");
  sweep.rank = std::atoi(proc);
  sweep.rank_count = std::atoi(tasks);
  const char* local = std::getenv("SLURM_LOCALID");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!local) return;
  std::vector<std::string> gpus;
  if (visible) {
    std::stringstream list(visible);
    for (std::string gpu; std::getline(list, gpu, ',');) gpus.push_back(gpu);
  }
  const auto index = static_cast<std::size_t>(std::atoi(local));
  if (!visible) setenv("CUDA_VISIBLE_DEVICES", local, 1);
  if (gpus.size() > 1 && index < gpus.size())
    setenv("CUDA_VISIBLE_DEVICES", gpus[index].c_str(), 1);
}

void parse_rank(const std::string& rank, SweepOptions& sweep) {
  if (rank == "slurm") {
    take_slurm_rank(sweep);
  } else {
    try {
      const auto slash = rank.find('/');
      if (slash == std::string::npos) throw std::invalid_argument(rank);
      sweep.rank = std::stoi(rank.substr(0, slash));
      sweep.rank_count = std::stoi(rank.substr(slash + 1));
    } catch (const std::exception&) {
      throw BadInput("command line", "--rank", "r/n, e.g. 1/4, got \"" + rank + "\"");
    }
  }
  if (sweep.rank < 0 || sweep.rank >= sweep.rank_count || sweep.rank_dir.empty() ||
      sweep.rank_cases.empty() || (sweep.rank == 0 && sweep.rank_results.empty()))
    throw BadInput("command line", "--rank",
                   "r/n with 0 <= r < n, --rank-dir, --rank-cases and (rank 0) --rank-results");
}

// The case ids of a file, one a line.
void add_case_ids(const std::string& path, std::set<std::string>& ids) {
  std::ifstream list(path);
  if (!list) throw BadInput(path, "--skip-ids", "a readable file of case ids, one a line");
  for (std::string id; std::getline(list, id);)
    if (!id.empty()) ids.insert(id);
}

// The ids of the cases a report checked. A case that ended in error (a fault, an interrupted
// device) is tried again.
// --costs REPORT: every case's timings.total_seconds (a number >= 0) by id, and its
// timings.host_peak_bytes where the report has them.
void add_measured_costs(const std::string& path, std::map<std::string, double>& seconds,
                        std::map<std::string, std::uint64_t>& host_bytes) {
  nlohmann::json report = load_json_file(path);
  JsonCursor root(report, path);
  JsonCursor results = root.at("results");
  results.expect_array(true);
  for (std::size_t i = 0; i < results.node().size(); ++i) {
    const nlohmann::json& c = results.node()[i];
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) continue;
    const auto timings = c.find("timings");
    if (timings == c.end() || !timings->is_object() || !timings->contains("total_seconds"))
      continue;
    const nlohmann::json& total = (*timings)["total_seconds"];
    if (!total.is_number() || !(total.get<double>() >= 0))
      throw BadInput(path, "results[" + std::to_string(i) + "].timings.total_seconds",
                     "a number of seconds >= 0");
    seconds[c["id"].get<std::string>()] = total.get<double>();
    if (const auto peak = timings->find("host_peak_bytes"); peak != timings->end()) {
      if (!peak->is_number_unsigned())
        throw BadInput(path, "results[" + std::to_string(i) + "].timings.host_peak_bytes",
                       "a whole number of bytes >= 0");
      host_bytes[c["id"].get<std::string>()] = peak->get<std::uint64_t>();
    }
  }
}

void add_done_case_ids(const std::string& path, std::set<std::string>& skip_ids) {
  nlohmann::json done = load_json_file(path);
  JsonCursor root(done, path);
  JsonCursor results = root.at("results");
  results.expect_array(true);
  for (const auto& c : results.node()) {
    if (c.is_object() && c.value("verdict", "") != "error" && c.contains("id") &&
        c["id"].is_string()) {
      skip_ids.insert(c["id"].get<std::string>());
    }
  }
}

int run(SweepFlags& flags, const Registry& registry) {
  SweepOptions& sweep = flags.sweep;
  if (!(sweep.case_timeout_seconds >= 0) || sweep.case_timeout_seconds > 7 * 24 * 3600.0) {
    throw BadInput("command line", "--case-timeout", "seconds in [0, 604800] (0: no limit)");
  }
  sweep.isolation = flags.isolate      ? SweepOptions::Isolation::on
                    : flags.no_isolate ? SweepOptions::Isolation::off
                                       : SweepOptions::Isolation::automatic;
  parse_seeds(flags.seeds, sweep.overrides.seeds);
  if (flags.repeats_option->count()) sweep.overrides.repeats = flags.repeats;
  if (flags.special_values) sweep.overrides.special_values = default_special_value_rate;
  if (flags.special_rate_option->count())
    sweep.overrides.special_values = flags.special_values_rate;
  if (flags.ids_option->count()) sweep.overrides.ids = flags.ids;
  if (!flags.shard.empty()) parse_shard(flags.shard, sweep.overrides);
  if (!flags.rank.empty()) parse_rank(flags.rank, sweep);
  if (!sweep.rank_launcher.empty() && sweep.devices.empty())
    throw BadInput("command line", "--rank-launcher",
                   "--devices beside it (this node's GPUs, which run the cases at tp = 1)");
  if (!flags.skip_ids.empty()) add_case_ids(flags.skip_ids, sweep.overrides.skip_ids);
  if (!sweep.overrides.shard_queue.empty()) {
    if (flags.shard.empty())
      throw BadInput("command line", "--shard-queue", "--shard i/n beside it");
    if (!std::filesystem::is_regular_file(sweep.overrides.shard_queue))
      throw BadInput("command line", "--shard-queue",
                     "an existing queue file (made by --devices), got \"" +
                         sweep.overrides.shard_queue + "\"");
  }
  sweep.skip_done_reports = flags.skip_done;
  for (const auto& path : flags.skip_done) add_done_case_ids(path, sweep.overrides.skip_ids);
  if (!sweep.costs_report.empty())
    add_measured_costs(sweep.costs_report, sweep.overrides.measured_seconds,
                       sweep.overrides.measured_host_bytes);
  sweep.progress = !flags.no_progress;
  return run_sweep(sweep, registry);
}

}  // namespace

void add_sweep_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<SweepFlags>();
  flags->sweep.argv = context.command_line.arguments();
  flags->sweep.worker_executable =
      "/proc/self/exe";  // this binary, even if its file was replaced meanwhile
  auto* command = app.add_subcommand(
      "sweep", "Run a sweep (the embedded default spec unless --spec is given) and write a report");
  declare_options(*command, *flags);
  context.on(
      command, [flags](const Registry& registry) { return run(*flags, registry); },
      [flags] { return with_spec_external_impls(flags->external, flags->sweep.spec_path); });
}

}  // namespace bitcheck::cli
