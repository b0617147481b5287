// `bitcheck sweep`: loads the contract and spec, expands cases, runs them with a progress line,
// writes the report atomically and prints the status matrix and the first failing op.
#include "sweep/sweep.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/backend.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "external/plugin_loader.h"
#include "report/coverage.h"
#include "report/report.h"
#include "run/runner.h"
#include "sweep/host_gate.h"
#include "sweep/isolation.h"
#include "sweep/rank_group.h"

namespace bitcheck {

namespace {
// The shared counter of --shard-queue: the next unit's index, 8 bytes at the start of the file,
// read and advanced under an exclusive flock so every unit goes to exactly one shard.
std::int64_t claim_next_unit(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("--shard-queue: cannot open " + path);
  std::int64_t next = -1;
  if (flock(fd, LOCK_EX) == 0) {
    std::int64_t value = 0;
    const ssize_t got = pread(fd, &value, sizeof value, 0);
    next = got == static_cast<ssize_t>(sizeof value) ? value : 0;
    const std::int64_t advanced = next + 1;
    if (pwrite(fd, &advanced, sizeof advanced, 0) != static_cast<ssize_t>(sizeof advanced))
      next = -1;
    flock(fd, LOCK_UN);
  }
  close(fd);
  if (next < 0) throw std::runtime_error("--shard-queue: cannot advance the counter in " + path);
  return next;
}
}  // namespace

void create_shard_queue(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::int64_t zero = 0;
  const bool written =
      fd >= 0 && write(fd, &zero, sizeof zero) == static_cast<ssize_t>(sizeof zero);
  if (fd >= 0) close(fd);
  if (!written) throw std::runtime_error("cannot create the shard queue " + path);
}

std::string utc_timestamp() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

nlohmann::json environment_meta(const Registry& registry) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  nlohmann::json meta = {{"bitcheck_version", version_string()},
                         {"git_revision", git_revision()},
                         {"host", host},
                         {"compile_flags", compile_flags()}};
  meta.update(device_backends_meta(registry));
  add_plugin_meta(meta);
  return meta;
}

namespace {
// Set by SIGINT/SIGTERM: the sweep stops after the case in flight and writes a partial report
// marked interrupted. A second signal ends the process at once (the handler resets itself).
volatile std::sig_atomic_t interrupt_signal = 0;
extern "C" void on_interrupt(int signal_number) {
  interrupt_signal = signal_number;
  std::signal(signal_number, SIG_DFL);
}

bool use_isolation(const SweepOptions& options, const Registry& registry,
                   const std::vector<CaseSpec>& cases) {
  if (options.isolation == SweepOptions::Isolation::off) return false;
  if (options.isolation == SweepOptions::Isolation::on) return true;
  if (options.case_timeout_seconds > 0 && !options.worker_executable.empty())
    return true;  // only a worker can be stopped
  // Code from outside (plugins, Python) may crash: its cases run in a worker too.
  if (!options.worker_executable.empty() &&
      std::any_of(cases.begin(), cases.end(),
                  [](const CaseSpec& c) { return is_external_impl(c.impl); }))
    return true;
  if (options.worker_executable.empty() || !registry.backend_available("cuda")) return false;
  return std::any_of(cases.begin(), cases.end(), [&](const CaseSpec& c) {
    const Impl* impl = registry.find_impl(c.op, c.impl);
    return impl && impl->backend() == "cuda";
  });
}

// One case: in the worker when isolated. In process, a sticky CUDA error leaves every later CUDA
// case unrunnable: each is `error`, naming the case that poisoned the context.
CaseResult run_sweep_case(const CaseSpec& spec, const Registry& registry, Runner& runner,
                          IsolatedRunner* isolated, std::optional<std::string>& poisoned_by) {
  if (isolated) return isolated->run_case(spec);
  const Impl* impl = registry.find_impl(spec.op, spec.impl);
  if (poisoned_by && impl && impl->backend() == "cuda") {
    return failed_case(registry, spec,
                       "not run: " + *poisoned_by + " (--isolate keeps a fault to its own case)",
                       0.0);
  }
  CheckedCase checked = run_case_checked(runner, registry, spec);
  if (checked.context_fault)
    poisoned_by = "case " + spec.id() + " poisoned the CUDA context with " + *checked.context_fault;
  return checked.result;
}

struct GatedCounts {
  int ran_alone = 0, retried_alone = 0;
};

void add_reason(CaseResult& result, const std::string& why) {
  result.reason = result.reason.empty() ? why : result.reason + "; " + why;
}

// One case through the shards' host memory gate: beside the other shards' cases, or alone when
// its peak host memory in the costs report (`needs_bytes`, 0: unknown) is above what the host has
// available now; and once more alone when a SIGKILL from outside (the OOM killer, most likely)
// ended its worker. Without the gate (one process, or in process) it just runs.
CaseResult run_gated_case(const HostMemoryGate& gate, std::uint64_t needs_bytes,
                          const std::function<CaseResult()>& run, const IsolatedRunner* isolated,
                          GatedCounts& counts, Printer& printer) {
  const std::optional<std::uint64_t> available =
      gate.enabled() && needs_bytes > 0 ? available_host_memory_bytes() : std::nullopt;
  const bool alone = available && needs_bytes > *available;
  CaseResult result;
  {
    const HostMemoryGate::Hold hold(gate, alone);
    result = run();
  }
  if (alone) {
    ++counts.ran_alone;
    add_reason(result, "ran alone: its peak host memory in the costs report (" +
                           bytes_text(static_cast<double>(needs_bytes)) +
                           ") was above what the host had available (" +
                           bytes_text(static_cast<double>(*available)) + ")");
  }
  if (!gate.enabled() || !isolated || !isolated->last_worker_killed_from_outside()) return result;
  printer.note(result.spec.id() + ": its worker was killed by SIGKILL (the host's OOM killer?); " +
               "retrying it with no other shard's case in flight");
  const std::string first = result.reason;
  {
    const HostMemoryGate::Hold hold(gate, true);
    result = run();
  }
  ++counts.retried_alone;
  add_reason(result,
             "retried alone (no other shard's case in flight) after its first run: " + first);
  return result;
}
}  // namespace

SweepPlan plan_run(const std::string& spec_path, const std::string& contract_path,
                   const SweepOverrides& overrides, const RunSettings& run,
                   const Registry& registry) {
  start_run(registry, run);
  SweepPlan plan;
  plan.contract = load_contract_or_embedded(contract_path, registry);
  plan.spec = spec_path.empty() ? load_embedded_sweep_spec(registry, plan.contract)
                                : load_sweep_spec(spec_path, registry, plan.contract);
  plan.spec = apply_overrides(plan.spec, overrides, registry, plan.contract);
  plan.cases = expand_cases(plan.spec, registry, overrides);
  return plan;
}

SweepPlan plan_sweep(const SweepOptions& options, const Registry& registry) {
  SweepPlan plan =
      plan_run(options.spec_path, options.contract_path, options.overrides, options.run, registry);
  if (plan.cases.empty())
    throw BadInput("command line", "--impl/--backend", "filters that leave at least one case");
  if (plan.cases.size() > options.max_cases && !options.confirmed) {
    throw BadInput(plan.spec.source, "$.ops",
                   "at most " + std::to_string(options.max_cases) +
                       " cases without --yes (this sweep expands to " +
                       std::to_string(plan.cases.size()) +
                       "; narrow it with --op/--dtype/--batch or pass --yes)");
  }
  return plan;
}

int run_sweep(const SweepOptions& options, const Registry& registry) {
  if (options.rank >= 0) return run_rank_worker(options, registry);
  if (!options.devices.empty()) return run_sweep_on_devices(options, registry);
  auto start = std::chrono::steady_clock::now();
  SweepPlan plan = plan_sweep(options, registry);
  const Contract& contract = plan.contract;
  const SweepSpec& spec = plan.spec;
  const std::vector<CaseSpec>& cases = plan.cases;
  interrupt_signal = 0;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);

  std::filesystem::create_directories(options.out_dir);
  RunMeta meta;
  meta.argv = options.argv;
  meta.spec_source = spec.source;
  meta.contract_source = contract.source;
  meta.started_at = utc_timestamp();

  Printer& printer = *options.printer;
  const bool show_progress = options.progress && printer.live();
  Runner runner(registry, contract);
  std::unique_ptr<IsolatedRunner> isolated;
  if (use_isolation(options, registry, cases)) {
    WorkerSettings settings{options.worker_executable, options.contract_path, options.run};
    settings.case_timeout_seconds = options.case_timeout_seconds;
    isolated = std::make_unique<IsolatedRunner>(registry, settings);
  }
  std::optional<std::string> poisoned_by;
  std::vector<CaseResult> results;
  results.reserve(cases.size());
  auto last_note = std::chrono::steady_clock::now();
  // The order of the cases: the spec's, or with --shard-queue the units this shard claims from the
  // shared counter, most expensive first (longest-first scheduling: the shards finish together
  // whatever the error of the cost estimates).
  const bool queued = !options.overrides.shard_queue.empty();
  std::vector<CaseUnit> units;
  if (queued) {
    units = case_units(cases, registry, options.overrides.shard_count,
                       options.overrides.measured_seconds);
    std::stable_sort(units.begin(), units.end(),
                     [](const CaseUnit& a, const CaseUnit& b) { return a.cost > b.cost; });
  }
  // The shards' host memory gate (sweep/host_gate.h): needs worker processes and shards.
  const HostMemoryGate gate(isolated ? options.overrides.shard_queue : std::string());
  GatedCounts gated;
  std::vector<std::size_t> pending;  // the claimed unit's cases not yet run
  std::size_t next_spec_case = 0, units_claimed = 0;
  auto next_case = [&]() -> std::optional<std::size_t> {
    if (!queued) {
      if (next_spec_case >= cases.size()) return std::nullopt;
      return next_spec_case++;
    }
    while (pending.empty()) {
      const std::int64_t unit = claim_next_unit(options.overrides.shard_queue);
      if (unit >= static_cast<std::int64_t>(units.size())) return std::nullopt;
      ++units_claimed;
      const auto& members = units[static_cast<std::size_t>(unit)].members;
      pending.assign(members.rbegin(), members.rend());  // popped from the back: spec order
    }
    const std::size_t i = pending.back();
    pending.pop_back();
    return i;
  };
  // "[k/n]": k cases run of the n of the sweep (with --shard-queue, n is every case of the sweep).
  for (;;) {
    if (interrupt_signal) {
      meta.interrupted = true;
      break;
    }
    const std::optional<std::size_t> next = next_case();
    if (!next) break;
    const std::size_t i = *next;
    const std::size_t done = results.size();
    const std::string count =
        "[" + std::to_string(done + 1) + "/" + std::to_string(cases.size()) + "] ";
    if (show_progress) {
      printer.progress(count + cases[i].id());
    } else if (options.progress &&
               std::chrono::steady_clock::now() - last_note > std::chrono::seconds(15)) {
      // Not a terminal (a log): a plain line every 15 s, so a cut-off run shows how far it got.
      last_note = std::chrono::steady_clock::now();
      const int seconds =
          static_cast<int>(std::chrono::duration<double>(last_note - start).count());
      printer.note(count + std::to_string(seconds) + " s " + cases[i].id());
    }
    const auto needs = options.overrides.measured_host_bytes.find(cases[i].id());
    CaseResult result = run_gated_case(
        gate, needs == options.overrides.measured_host_bytes.end() ? 0 : needs->second,
        [&] { return run_sweep_case(cases[i], registry, runner, isolated.get(), poisoned_by); },
        isolated.get(), gated, printer);
    results.push_back(std::move(result));
  }
  printer.end_progress();
  nlohmann::json isolation = {{"mode", isolated ? "worker process" : "in process"}};
  if (isolated) {
    isolation["workers_started"] = isolated->workers_started();
    isolation["faults"] = isolated->faults();
    if (gate.enabled()) {
      isolation["retried_alone"] = gated.retried_alone;
      isolation["ran_alone"] = gated.ran_alone;
    }
    isolated.reset();  // the worker exits (writing derived pins back when asked)
  }

  std::vector<std::string> op_order;
  for (const OpDef* op : registry.ops()) op_order.push_back(op->name);
  meta.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Summary summary = summarize(results, op_order);
  std::vector<std::string> deferred_controls;
  if (options.overrides.shard_count > 1) {
    deferred_controls = summary.harness_failures;
    summary = shard_summary(std::move(summary));
  }
  nlohmann::json report =
      build_report(meta, environment_meta(registry), results, summary, registry);
  report["meta"]["isolation"] = isolation;
  std::string path = (std::filesystem::path(options.out_dir) / options.report_name).string();
  write_file_atomically(path, report.dump(1) + "\n");

  finish_run(registry);
  printer.result(render_terminal_summary(report, registry));
  for (const auto& note : deferred_controls) {
    printer.result("shard " + std::to_string(options.overrides.shard_index) + "/" +
                   std::to_string(options.overrides.shard_count) + ": " + note +
                   " here; judged on the merged report\n");
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const std::string seconds = std::to_string(static_cast<int>(meta.wall_seconds + 0.5)) + " s)\n";
  if (queued) {
    printer.result("report: " + path + " (" + std::to_string(results.size()) + " cases in " +
                   std::to_string(units_claimed) + " units from the shared queue, " + seconds);
  } else {
    printer.result("report: " + path + " (" + std::to_string(results.size()) + " of " +
                   std::to_string(cases.size()) + " cases, " + seconds);
  }
  if (meta.interrupted) {
    printer.note("bitcheck: interrupted by signal " + std::to_string(interrupt_signal) + " after " +
                 std::to_string(results.size()) + " of " + std::to_string(cases.size()) +
                 " cases; the report holds those and is marked interrupted");
    return exit_internal;
  }
  if (options.overrides.shard_count > 1) return summary.exit_code;
  return judge_coverage(options, report, summary.exit_code);
}

int judge_coverage(const SweepOptions& options, const nlohmann::json& report, int exit_code) {
  if (!options.require_coverage) return exit_code;
  const std::vector<std::string> gaps = coverage_gaps(compute_coverage(report));
  Printer& printer = *options.printer;
  if (gaps.empty()) {
    printer.result("coverage: every declared path of the invariant impls ran\n");
    return exit_code;
  }
  std::string text = "COVERAGE GAP: " + std::to_string(gaps.size()) +
                     " declared path(s) of invariant impls never ran (--require-coverage):\n";
  for (const auto& gap : gaps) text += "  " + gap + "\n";
  printer.result(text);
  return exit_code == exit_pass ? exit_findings : exit_code;
}

}  // namespace bitcheck
