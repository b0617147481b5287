// The sweep driver behind `bitcheck sweep`: contract + spec -> cases -> runner -> report.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/printer.h"
#include "core/run_settings.h"
#include "spec/contract.h"
#include "spec/spec.h"

namespace bitcheck {

struct SweepOptions {
  std::string spec_path;      // empty: the embedded default spec
  std::string contract_path;  // empty: the embedded contract
  SweepOverrides overrides;
  std::string out_dir = "out";
  std::string report_name = "report.json";
  std::vector<std::string> argv;
  bool progress = true;           // a progress line on stderr when it is a terminal
  RunSettings run;                // --pins, --write-pins: handed to the ops' run hooks
  std::size_t max_cases = 20000;  // a spec expanding to more is refused unless confirmed
  bool confirmed = false;         // --yes
  // Fault isolation (isolation.h): cases run in a worker process, so a crash or a sticky CUDA error
  // costs only its own case. automatic: on when CUDA cases can run (--isolate / --no-isolate).
  enum class Isolation { automatic, on, off };
  Isolation isolation = Isolation::automatic;
  std::string
      worker_executable;  // the binary with the __sweep-worker subcommand; empty: in process
  double case_timeout_seconds = 0;  // --case-timeout: an isolated case's time limit (0: none)
  std::vector<std::string> skip_done_reports;  // --skip-done (their ids are in overrides.skip_ids)
  std::string costs_report;  // --costs (its times are in overrides.measured_seconds)
  // --devices: one shard per entry, run in parallel as child processes of this binary with
  // CUDA_VISIBLE_DEVICES=<entry>, merged into one report (an entry may repeat: two shards on it).
  std::vector<std::string> devices;
  // --device-slots: how many of the shards on one device may be inside impl calls at once
  // (run/device_slots.h); 0: no bound. Off by default: on the nightly (16 shards on one H100)
  // 4 slots halved the impl calls' time but made the run slower (386 s against 351 s).
  int device_slots = 0;
  // --require-coverage: exit 1 when a declared launch path of an invariant impl never ran (judged
  // on the whole run: a shard leaves it to the merged report).
  bool require_coverage = false;
  Printer* printer = &terminal_printer();  // the summary, report paths, notes and progress
  // A rank of a group of processes running cases at tp > 1 (rank_group.h): set by --rank r/n,
  // --rank-dir and --rank-cases in the processes the parent starts.
  int rank = -1;
  int rank_count = 0;
  std::string rank_dir;
  std::string rank_cases;    // a file of case ids, one a line: the cases the group runs, in order
  std::string rank_results;  // rank 0 appends each case's entry here, a line each
  // How the group's processes start: "" on this host, one per GPU of `devices`; "srun": one
  // Slurm step of one task per rank across the allocation's nodes (each task a GPU of its node),
  // meeting in rank_dir on the shared file system (--rank-launcher).
  std::string rank_launcher;
  // How long a case of a rank group may take before the group is killed and the case is `error`.
  double rank_case_timeout_seconds = 900;
  // The group times its cases (Impl::benchmark on every rank) instead of checking them: `bitcheck
  // bench --devices` for cases at tp > 1.
  bool rank_bench = false;
  BenchSettings bench;
};

// The exit code once --require-coverage has judged the report: the gaps are printed, and a run
// that would exit 0 exits 1 when there are any.
int judge_coverage(const SweepOptions& options, const nlohmann::json& report, int exit_code);

// What a run will run: the contract, the spec with the overrides applied and the cases (of the
// shard, when sharded).
struct SweepPlan {
  Contract contract;
  SweepSpec spec;
  std::vector<CaseSpec> cases;
};
// The one planning of every command that expands a spec (sweep, the parent of --devices, bench):
// starts the run (start_run with `run`) before it expands the cases, because an impl's switch
// points ("batches": "switch-points") may depend on the run's settings: the pinned matmul's come
// from the pin table --pins names. An empty spec_path: the embedded spec; an empty contract_path:
// the embedded contract.
SweepPlan plan_run(const std::string& spec_path, const std::string& contract_path,
                   const SweepOverrides& overrides, const RunSettings& run,
                   const Registry& registry);
// plan_run for a sweep. BadInput for a sweep with no case or over the case limit without --yes.
SweepPlan plan_sweep(const SweepOptions& options, const Registry& registry);

// Host, git revision, compile flags, and each device backend's device and library versions (the
// CUDA backend's under "cuda").
nlohmann::json environment_meta(const Registry& registry);
std::string utc_timestamp();

// Runs the sweep and writes the report; returns the exit code (0/1/3). BadInput propagates (2).
int run_sweep(const SweepOptions& options, const Registry& registry);
// `--devices`: the sweep as one child process per device (see SweepOptions::devices), each writing
// a shard report to a temporary directory; SIGINT/SIGTERM are forwarded to the children and the
// merged partial report is marked interrupted. Same exit codes as run_sweep.
int run_sweep_on_devices(const SweepOptions& options, const Registry& registry);
// The counter file of --shard-queue, at 0 (run_sweep_on_devices makes one for its shards).
void create_shard_queue(const std::string& path);

}  // namespace bitcheck
