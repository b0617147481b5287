// The rank group: the parent starts one process per rank and watches them; each rank walks the
// case list in step with the others; rank 0 writes the results.
#include "sweep/rank_group.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/json_input.h"
#include "report/case_json.h"
#include "run/case_checks.h"
#include "run/runner.h"
#include "sweep/child_process.h"

namespace bitcheck {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  int rank = 0;
  std::string device, log_path;
  pid_t pid = -1;
  bool done = false;
  int exit_code = 0;  // -N when killed by signal N
};

// The tasks of the Slurm allocation this parent runs in (SLURM_NTASKS), as slots "task 0", ...
std::vector<std::string> slurm_task_slots() {
  const char* tasks = std::getenv("SLURM_NTASKS");
  const int count = tasks ? std::atoi(tasks) : 0;
  std::vector<std::string> slots;
  for (int t = 0; t < count; ++t) slots.push_back("task " + std::to_string(t));
  return slots;
}

std::vector<std::string> distinct(const std::vector<std::string>& devices) {
  std::vector<std::string> kept;
  std::set<std::string> seen;
  for (const auto& device : devices)
    if (seen.insert(device).second) kept.push_back(device);
  return kept;
}

// Every complete line of the results file (rank 0 appends one per case).
std::map<std::string, nlohmann::json> read_results(const std::string& path) {
  std::map<std::string, nlohmann::json> results;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    if (entry.is_object() && entry.contains("id")) results[entry["id"].get<std::string>()] = entry;
  }
  return results;
}

// The entry of a case the group did not finish: `error`, with why and the ranks' last lines.
nlohmann::json error_entry(const CaseSpec& spec, const Registry& registry,
                           const std::string& reason) {
  CaseResult result;
  result.spec = spec;
  const Impl* impl = registry.find_impl(spec.op, spec.impl);
  result.backend = impl ? impl->backend() : "";
  result.is_control = impl && !impl->claims_invariance();
  result.expected_to_drift = impl && case_expected_to_drift(*impl, spec);
  result.is_observation = impl && impl->is_library_default();
  result.verdict = Verdict::error;
  result.reason = reason;
  return case_entry(result, registry);
}

// Kills every rank still running and reaps them; a rank stuck in the driver (uninterruptible) is
// left to the system after a few seconds rather than holding up the sweep.
void kill_group(std::vector<Rank>& ranks) {
  for (auto& rank : ranks) {
    if (!rank.done) kill(-rank.pid, SIGKILL);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (auto& rank : ranks) {
    while (!rank.done) {
      int status = 0;
      if (waitpid(rank.pid, &status, WNOHANG) == rank.pid || Clock::now() > deadline) {
        rank.done = true;
        rank.exit_code = -SIGKILL;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

// One group over `cases`: runs until every rank exits, a rank fails, a case takes longer than
// the limit, or `stop_requested` says so (the ranks are killed; `stopped` set). Returns the fault
// ("" when the group finished or was stopped).
std::string run_group(const SweepOptions& options, const std::vector<CaseSpec>& cases,
                      const std::vector<std::string>& devices, const std::string& directory,
                      const std::string& results_path, const std::function<bool()>& stop_requested,
                      const std::string& label, bool& stopped) {
  std::filesystem::create_directories(directory);
  const std::string cases_path = directory + "/cases.txt";
  {
    std::ofstream list(cases_path);
    for (const auto& c : cases) list << c.id() << "\n";
  }
  std::error_code ignored;
  std::string binary = std::filesystem::read_symlink("/proc/self/exe", ignored).string();
  if (binary.empty()) binary = options.argv.front();
  const int size = static_cast<int>(devices.size());
  // Under srun the group is one process here, the Slurm step, whose tasks are the ranks.
  const bool srun = options.rank_launcher == "srun";
  std::vector<Rank> ranks(srun ? 1 : static_cast<std::size_t>(size));
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    Rank& rank = ranks[static_cast<std::size_t>(r)];
    rank.rank = r;
    rank.device = srun ? "srun step of " + std::to_string(size) + " tasks"
                       : devices[static_cast<std::size_t>(r)];
    rank.log_path = directory + (srun ? "/srun.log" : "/rank-" + std::to_string(r) + ".log");
    std::vector<std::string> args = sweep_child_args(options, binary);
    if (srun) {
      args.insert(args.begin(), {"srun", "--ntasks=" + std::to_string(size), "--gpus-per-task=1",
                                 "--kill-on-bad-exit=1", "--label"});
    }
    if (options.rank_bench) {
      for (const std::string& arg :
           {std::string("--rank-bench"), std::string("--bench-warmup"),
            std::to_string(options.bench.warmup), std::string("--bench-repeats"),
            std::to_string(options.bench.repeats)})
        args.push_back(arg);
    }
    for (const std::string& arg :
         {std::string("--no-isolate"), std::string("--no-progress"), std::string("--rank"),
          // Under srun each task takes its rank from Slurm.
          srun ? std::string("slurm") : std::to_string(r) + "/" + std::to_string(size),
          std::string("--rank-dir"), directory, std::string("--rank-cases"), cases_path,
          std::string("--rank-results"), results_path, std::string("--out"), directory})
      args.push_back(arg);
    auto environment = multi_gpu_safe_environment();
    if (!srun) environment.push_back({"CUDA_VISIBLE_DEVICES", rank.device});
    rank.pid = spawn_child(args, environment, rank.log_path);
  }
  std::size_t finished = read_results(results_path).size();
  auto last_progress = Clock::now(), last_note = Clock::now();
  Printer& printer = *options.printer;
  for (;;) {
    std::size_t running = 0;
    for (auto& rank : ranks) {
      if (rank.done) continue;
      int status = 0;
      if (waitpid(rank.pid, &status, WNOHANG) != rank.pid) {
        ++running;
        continue;
      }
      rank.done = true;
      rank.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      if (rank.exit_code != 0) {
        kill_group(ranks);
        return "rank " + std::to_string(rank.rank) + " (device " + rank.device + ") " +
               exit_text(rank.exit_code) + "; the end of its log:\n" + log_tail(rank.log_path, 8);
      }
    }
    if (running == 0) return "";
    if (stop_requested && stop_requested()) {
      kill_group(ranks);
      stopped = true;
      return "";
    }
    const std::size_t now_finished = read_results(results_path).size();
    if (now_finished != finished) {
      finished = now_finished;
      last_progress = Clock::now();
    }
    if (Clock::now() - last_note > std::chrono::seconds(15)) {
      last_note = Clock::now();
      printer.note(label + ": " + std::to_string(finished) + " cases done, " +
                   std::to_string(running) + " ranks running");
    }
    const double waited = std::chrono::duration<double>(Clock::now() - last_progress).count();
    if (waited > options.rank_case_timeout_seconds) {
      kill_group(ranks);
      return "no rank of the group finished the case in " +
             std::to_string(static_cast<int>(options.rank_case_timeout_seconds)) +
             " s (a rank hung, or waited in a collective for one that failed); rank 0's log:\n" +
             log_tail(ranks.front().log_path, 8);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A rank of a timing group: every case's benchmark on every rank of it, rank 0's times written.
int run_rank_bench(const SweepOptions& options, const Registry& registry,
                   const std::vector<const CaseSpec*>& cases) {
  std::ofstream results;
  if (options.rank == 0) results.open(options.rank_results, std::ios::app);
  for (const CaseSpec* c : cases) {
    if (options.rank >= c->tp) continue;
    nlohmann::json entry = {{"id", c->id()}};
    try {
      std::optional<BenchMeasurement> measured =
          registry.find_impl(c->op, c->impl)->benchmark(*c, options.bench);
      if (!measured) continue;
      entry.update({{"median_ms", measured->median_ms},
                    {"min_ms", measured->min_ms},
                    {"flops", measured->flops},
                    {"bytes_moved", measured->bytes_moved},
                    {"config", measured->config}});
    } catch (const std::exception& error) {
      entry["error"] = error.what();
    }
    options.printer->note("rank " + std::to_string(options.rank) + " timed " + c->id());
    if (options.rank == 0) results << entry.dump() << "\n" << std::flush;
  }
  return exit_pass;
}

// A Printer that several groups' threads share: one message at a time.
class LockedPrinter : public Printer {
 public:
  explicit LockedPrinter(Printer& inner) : inner_(inner) {}
  void result(const std::string& text) override {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_.result(text);
  }
  void note(const std::string& line) override {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_.note(line);
  }
  void progress(const std::string& line) override {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_.progress(line);
  }
  void end_progress() override {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_.end_progress();
  }
  bool live() const override { return inner_.live(); }

 private:
  Printer& inner_;
  std::mutex mutex_;
};

// What one team (a list of cases on one set of devices) came to.
struct TeamRun {
  std::map<std::string, nlohmann::json> results;
  int groups_started = 0;
  nlohmann::json faults = nlohmann::json::array();
  bool interrupted = false;
};

// A team's cases on `devices`, a group at a time: after a fault, a new group starts at the next
// case, until every case has an entry or a stop.
TeamRun run_team(const SweepOptions& options, const Registry& registry,
                 const std::vector<CaseSpec>& cases, const std::vector<std::string>& devices,
                 const std::string& work_dir, const std::string& label,
                 const std::function<bool()>& stop_requested) {
  TeamRun team;
  const std::string results_path = work_dir + "/results.jsonl";
  std::vector<CaseSpec> remaining = cases;
  for (int attempt = 0; !remaining.empty(); ++attempt) {
    team.groups_started = attempt + 1;
    bool stopped = false;
    const std::string fault =
        run_group(options, remaining, devices, work_dir + "/group-" + std::to_string(attempt),
                  results_path, stop_requested, label, stopped);
    for (auto& [id, entry] : read_results(results_path)) team.results[id] = std::move(entry);
    if (stopped) {  // the finished cases only: the others neither ran nor failed
      team.interrupted = true;
      break;
    }
    std::vector<CaseSpec> left;
    bool failed = fault.empty();
    for (const auto& c : remaining) {
      if (team.results.count(c.id())) continue;
      if (!failed) {  // the case the group was on when it failed
        team.results[c.id()] = error_entry(c, registry, fault);
        team.faults.push_back({{"case", c.id()}, {"reason", fault}});
        failed = true;
        continue;
      }
      left.push_back(c);
    }
    if (fault.empty() && !left.empty()) {  // every rank exited 0 and some cases are missing
      for (const auto& c : left)
        team.results[c.id()] = error_entry(c, registry, "the group ended without running the case");
      left.clear();
    }
    remaining = std::move(left);
  }
  return team;
}

}  // namespace

std::vector<std::vector<RankTeam>> plan_rank_teams(const SweepOptions& options,
                                                   const std::vector<CaseSpec>& cases,
                                                   const std::vector<std::string>& devices,
                                                   int size) {
  if (options.rank_launcher == "srun" || options.rank_bench) {
    return {{RankTeam{size, {devices.begin(), devices.begin() + size}, cases}}};
  }
  std::map<int, std::vector<CaseSpec>, std::greater<int>> by_size;
  for (const auto& c : cases) by_size[std::min(c.tp, size)].push_back(c);
  std::vector<std::vector<RankTeam>> phases;
  for (auto& [group_size, sized] : by_size) {
    const int groups = std::max(1, static_cast<int>(devices.size()) / group_size);
    std::vector<RankTeam> phase(static_cast<std::size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      RankTeam& team = phase[static_cast<std::size_t>(g)];
      team.group_size = group_size;
      team.devices.assign(devices.begin() + g * group_size, devices.begin() + (g + 1) * group_size);
    }
    for (std::size_t i = 0; i < sized.size(); ++i)
      phase[i % phase.size()].cases.push_back(sized[i]);
    while (!phase.empty() && phase.back().cases.empty()) phase.pop_back();
    phases.push_back(std::move(phase));
  }
  return phases;
}

bool needs_rank_group(const CaseSpec& c, const Registry& registry) {
  if (c.tp <= 1) return false;
  const Impl* impl = registry.find_impl(c.op, c.impl);
  return impl && registry.device_backend(impl->backend()) != nullptr;
}

RankGroupRun run_rank_group(const SweepOptions& options, const Registry& registry,
                            const std::vector<CaseSpec>& cases, const std::string& work_dir,
                            const std::function<bool()>& stop_requested) {
  RankGroupRun run;
  int largest = 1;
  for (const auto& c : cases) largest = std::max(largest, c.tp);
  // On this host: one rank per distinct GPU of --devices. Under srun: the allocation's tasks.
  std::vector<std::string> devices = distinct(options.devices);
  if (options.rank_launcher == "srun") devices = slurm_task_slots();
  const int size = std::min<int>(largest, static_cast<int>(devices.size()));
  run.meta = {{"size", size},
              {"devices", std::vector<std::string>(devices.begin(), devices.begin() + size)},
              {"groups_started", 0},
              {"faults", nlohmann::json::array()}};
  std::optional<std::string> unavailable;
  if (size < 2) {
    unavailable = options.rank_launcher == "srun"
                      ? "a group of ranks under srun needs an allocation of 2 or more tasks "
                        "(SLURM_NTASKS)"
                      : "a group of ranks needs --devices listing 2 or more distinct GPUs";
  }
  for (const auto& c : cases) {
    const Impl* impl = registry.find_impl(c.op, c.impl);
    if (!unavailable) unavailable = registry.device_backend(impl->backend())->ranks_unavailable();
    if (unavailable) break;
  }
  std::map<std::string, nlohmann::json> results;
  if (!unavailable) {
    LockedPrinter printer(*options.printer);
    SweepOptions shared = options;
    shared.printer = &printer;
    int groups_started = 0;
    nlohmann::json teams_meta = nlohmann::json::array();
    std::size_t used = 0;
    const std::vector<std::vector<RankTeam>> phases =
        plan_rank_teams(options, cases, devices, size);
    for (std::size_t p = 0; p < phases.size() && !run.meta.contains("interrupted"); ++p) {
      const std::vector<RankTeam>& phase = phases[p];
      std::vector<TeamRun> runs(phase.size());
      std::vector<std::exception_ptr> failures(phase.size());
      std::vector<std::thread> threads;
      for (std::size_t t = 0; t < phase.size(); ++t) {
        const RankTeam& team = phase[t];
        std::string label = "rank group";
        if (phases.size() > 1 || phase.size() > 1) {
          label += " on";
          for (const auto& device : team.devices) label += " " + device;
        }
        // One team alone runs in its own directory as before; teams side by side in theirs.
        const std::string directory =
            phases.size() == 1 && phase.size() == 1
                ? work_dir
                : work_dir + "/team-" + std::to_string(p) + "-" + std::to_string(t);
        used = std::max(used, (t + 1) * team.devices.size());
        teams_meta.push_back({{"group_size", team.group_size},
                              {"devices", team.devices},
                              {"cases", team.cases.size()}});
        threads.emplace_back([&, t, label, directory] {
          try {
            runs[t] = run_team(shared, registry, phase[t].cases, phase[t].devices, directory, label,
                               stop_requested);
          } catch (...) {  // rethrown here once every team of the phase has ended
            failures[t] = std::current_exception();
          }
        });
      }
      for (auto& thread : threads) thread.join();
      for (const auto& failure : failures)
        if (failure) std::rethrow_exception(failure);
      for (TeamRun& team : runs) {
        for (auto& [id, entry] : team.results) results[id] = std::move(entry);
        groups_started += team.groups_started;
        for (auto& fault : team.faults) run.meta["faults"].push_back(std::move(fault));
        if (team.interrupted) run.meta["interrupted"] = true;
      }
    }
    run.meta["groups_started"] = groups_started;
    run.meta["teams"] = teams_meta;
    // The devices some team ran on: teams take consecutive slices of `devices` from its start.
    run.meta["devices"] = std::vector<std::string>(devices.begin(), devices.begin() + used);
  }
  for (const auto& c : cases) {
    auto found = results.find(c.id());
    if (found != results.end()) {
      run.results.push_back(found->second);
      continue;
    }
    if (run.meta.contains("interrupted")) continue;
    CaseResult skipped;
    skipped.spec = c;
    skipped.backend = registry.find_impl(c.op, c.impl)->backend();
    skipped.is_control = !registry.find_impl(c.op, c.impl)->claims_invariance();
    skipped.verdict = Verdict::skipped;
    skipped.reason = "tp=" + std::to_string(c.tp) + ": " + unavailable.value_or("no rank ran it");
    run.results.push_back(case_entry(skipped, registry));
  }
  return run;
}

int run_rank_worker(const SweepOptions& options, const Registry& registry) {
  const SweepPlan plan = plan_sweep(options, registry);
  std::map<std::string, const CaseSpec*> by_id;
  for (const auto& c : plan.cases) by_id[c.id()] = &c;
  std::vector<const CaseSpec*> cases;
  {
    std::ifstream list(options.rank_cases);
    if (!list) throw BadInput(options.rank_cases, "--rank-cases", "a readable list of case ids");
    for (std::string id; std::getline(list, id);) {
      if (id.empty()) continue;
      auto found = by_id.find(id);
      if (found == by_id.end())
        throw BadInput(options.rank_cases, "--rank-cases", "ids of this sweep's cases, got " + id);
      cases.push_back(found->second);
    }
  }
  const RankGroup group{options.rank, options.rank_count, options.rank_dir};
  std::set<std::string> joined;
  for (const CaseSpec* c : cases) {
    const std::string backend = registry.find_impl(c->op, c->impl)->backend();
    if (joined.insert(backend).second) registry.device_backend(backend)->join_ranks(group);
  }
  if (options.rank_bench) return run_rank_bench(options, registry, cases);
  Runner runner(registry, plan.contract);
  std::ofstream results;
  if (options.rank == 0) results.open(options.rank_results, std::ios::app);
  // Each case's start and end in the rank's log, so a group that stops shows where each rank was.
  const auto start = Clock::now();
  auto stamp = [&] {
    return std::to_string(
               static_cast<int>(std::chrono::duration<double>(Clock::now() - start).count())) +
           " s";
  };
  Printer& printer = *options.printer;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    printer.note("rank " + std::to_string(options.rank) + " [" + std::to_string(i + 1) + "/" +
                 std::to_string(cases.size()) + "] " + stamp() + " start " + cases[i]->id());
    CaseResult result = runner.run_case(*cases[i]);
    printer.note("rank " + std::to_string(options.rank) + " " + stamp() + " " +
                 to_string(result.verdict) + (result.reason.empty() ? "" : ": " + result.reason));
    if (options.rank != 0) continue;
    results << case_entry(result, registry).dump() << "\n" << std::flush;
  }
  return exit_pass;
}

}  // namespace bitcheck
