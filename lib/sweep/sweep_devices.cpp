// `bitcheck sweep --devices 0,1,...`: the sweep as one cost-balanced shard per listed device, each
// a child process of this binary (CUDA_VISIBLE_DEVICES=<device>, --shard i/n) writing its report to
// a temporary directory, merged into the one report. On the CPU backend the devices only set the
// parallelism.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/host_threads.h"
#include "core/json_input.h"
#include "external/plugin_loader.h"
#include "report/report.h"
#include "run/device_slots.h"
#include "sweep/child_process.h"
#include "sweep/rank_group.h"
#include "sweep/sweep.h"

namespace bitcheck {
namespace {

// Signals received by the parent; each new one is forwarded to the children, which stop after the
// case in flight and write a partial report (a second one ends them at once, as for a plain sweep).
volatile std::sig_atomic_t signals_received = 0;
volatile std::sig_atomic_t last_signal = 0;
extern "C" void on_parent_signal(int signal_number) {
  last_signal = signal_number;
  signals_received = signals_received + 1;
}

template <typename T>
std::string join(const std::vector<T>& values) {
  std::ostringstream text;
  for (std::size_t i = 0; i < values.size(); ++i) text << (i ? "," : "") << values[i];
  return text.str();
}

struct Shard {
  int index = 0;
  std::string device;
  std::vector<std::string> args;
  std::string report_path, log_path;
  pid_t pid = -1;
  bool done = false;
  int exit_code = -1;  // -N when killed by signal N
  double seconds = 0;
};

// The child's command line: the same sweep, as shard i of n taking its work from the shared queue,
// writing into the temporary directory.
std::vector<std::string> shard_args(const SweepOptions& options, const std::string& binary,
                                    int index, int count, const std::string& out_dir,
                                    const std::string& report_name, const std::string& queue_path,
                                    const std::string& skip_ids_path) {
  std::vector<std::string> args = sweep_child_args(options, binary);
  auto add = [&](const char* flag, const std::string& value) {
    args.push_back(flag);
    args.push_back(value);
  };
  if (options.isolation == SweepOptions::Isolation::on) args.push_back("--isolate");
  if (options.isolation == SweepOptions::Isolation::off) args.push_back("--no-isolate");
  if (!options.progress) args.push_back("--no-progress");
  if (!skip_ids_path.empty()) add("--skip-ids", skip_ids_path);
  add("--shard", std::to_string(index) + "/" + std::to_string(count));
  add("--shard-queue", queue_path);
  add("--out", out_dir);
  add("--report-name", report_name);
  return args;
}

void validate_devices(const SweepOptions& options) {
  for (const auto& device : options.devices) {
    bool plain = !device.empty();
    for (char c : device)
      plain = plain &&
              (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_');
    if (!plain)
      throw BadInput("command line", "--devices",
                     "device ids (e.g. 0,1,2,3 or GPU UUIDs), got \"" + device + "\"");
  }
  if (options.overrides.shard_count > 1) {
    throw BadInput("command line", "--devices",
                   "no --shard with it (--devices shards the sweep itself)");
  }
  if (options.run.write_pins) {
    throw BadInput("command line", "--devices",
                   "no --write-pins with it (shards would overwrite each other's pins; derive pins "
                   "in a plain sweep)");
  }
}

// The child's latest progress line ("[k/n] ..."), read from the end of its log.
std::string latest_progress(const std::string& log_path) {
  std::ifstream log(log_path, std::ios::binary);
  if (!log) return "";
  log.seekg(0, std::ios::end);
  std::streamoff size = log.tellg();
  log.seekg(std::max<std::streamoff>(0, size - 4096));
  std::string tail =
      "\n" + std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::size_t line = tail.rfind("\n[", tail.size() > 1 ? tail.size() - 2 : 0);
  if (line == std::string::npos) return "";
  std::size_t close = tail.find(']', line);
  return close == std::string::npos ? "" : tail.substr(line + 1, close - line);
}

// A report of case entries (the rank group's), as a shard would have written it.
nlohmann::json report_of_entries(const std::vector<nlohmann::json>& entries,
                                 const SweepOptions& options, const Registry& registry) {
  std::vector<CaseResult> results;
  for (const auto& entry : entries)
    results.push_back(case_from_json(JsonCursor(entry, "rank group")));
  RunMeta meta;
  meta.argv = options.argv;
  meta.spec_source = options.spec_path.empty() ? "embedded" : options.spec_path;
  meta.started_at = utc_timestamp();
  return build_report(meta, environment_meta(registry), results, registry);
}

}  // namespace

int run_sweep_on_devices(const SweepOptions& options, const Registry& registry) {
  Printer& printer = *options.printer;
  auto start = std::chrono::steady_clock::now();
  validate_devices(options);
  const SweepPlan plan =
      plan_sweep(options, registry);  // bad input is refused before any child runs
  const int count = static_cast<int>(options.devices.size());

  std::filesystem::create_directories(options.out_dir);
  std::string pattern =
      (std::filesystem::path(options.out_dir) / ".bitcheck-devices-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a temporary directory in " + options.out_dir);
  const std::string work_dir = pattern;
  std::error_code ignored;
  const std::string binary = std::filesystem::read_symlink("/proc/self/exe", ignored).string();
  // The earlier report's case times (--costs) are read once, here: the children get the times of
  // this sweep's cases, not a nightly's tens of MB of report to parse each (a second apiece).
  SweepOptions for_children = options;
  if (!options.costs_report.empty()) {
    for_children.costs_report = work_dir + "/costs.json";
    nlohmann::json results = nlohmann::json::array();
    for (const auto& c : plan.cases) {
      const auto found = options.overrides.measured_seconds.find(c.id());
      if (found == options.overrides.measured_seconds.end()) continue;
      nlohmann::json timings = {{"total_seconds", found->second}};
      const auto host = options.overrides.measured_host_bytes.find(c.id());
      if (host != options.overrides.measured_host_bytes.end())
        timings["host_peak_bytes"] = host->second;
      results.push_back({{"id", found->first}, {"timings", timings}});
    }
    std::ofstream(for_children.costs_report) << nlohmann::json{{"results", results}}.dump();
  }

  // Cases at tp > 1 on a device backend run first, in a group of rank processes; the shards skip
  // them and run every other case.
  std::vector<nlohmann::json> reports;
  std::vector<std::string> sources, missing;
  std::vector<CaseSpec> group_cases, shard_cases;
  for (const auto& c : plan.cases)
    (needs_rank_group(c, registry) ? group_cases : shard_cases).push_back(c);
  nlohmann::json rank_group_meta;
  std::string skip_ids_path;
  // From here a signal stops the sweep: forwarded to the running shards, or, during the rank
  // group, ending it before any shard starts.
  signals_received = 0;
  std::signal(SIGINT, on_parent_signal);
  std::signal(SIGTERM, on_parent_signal);
  if (!group_cases.empty()) {
    if (options.progress) {
      printer.note("rank group: " + std::to_string(group_cases.size()) +
                   " cases at tp > 1, one process per rank, logs in " + work_dir + "/ranks");
    }
    // A signal here stops the group (its ranks are killed) and the shards never start: the
    // report holds the cases the group finished and is marked interrupted.
    const auto group_start = std::chrono::steady_clock::now();
    RankGroupRun group = run_rank_group(for_children, registry, group_cases, work_dir + "/ranks",
                                        [] { return signals_received > 0; });
    rank_group_meta = group.meta;
    reports.push_back(report_of_entries(group.results, options, registry));
    // The group's own wall time (its cases' teams side by side), as each shard's.
    reports.back()["meta"]["wall_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - group_start).count();
    sources.push_back("rank group of " + std::to_string(group.meta["size"].get<int>()));
    skip_ids_path = work_dir + "/rank-group-cases.txt";
    std::ofstream ids(skip_ids_path);
    for (const auto& c : group_cases) ids << c.id() << "\n";
  }

  // The shards share one queue of work units (case_units, most expensive first): each takes the
  // next when it finishes one, so they finish together however wrong the cost estimates are.
  const std::string queue_path = work_dir + "/queue";
  create_shard_queue(queue_path);
  const std::size_t unit_count =
      case_units(shard_cases, registry, count, options.overrides.measured_seconds).size();

  std::vector<Shard> shards(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    Shard& shard = shards[static_cast<std::size_t>(i)];
    shard.index = i;
    shard.device = options.devices[static_cast<std::size_t>(i)];
    const std::string name = "shard-" + std::to_string(i);
    shard.report_path = work_dir + "/" + name + ".json";
    shard.log_path = work_dir + "/" + name + ".log";
    shard.args = shard_args(for_children, binary.empty() ? options.argv.front() : binary, i, count,
                            work_dir, name + ".json", queue_path, skip_ids_path);
  }
  if (shard_cases.empty() || signals_received > 0) shards.clear();

  // Shards sharing a GPU take turns in impl calls, a few at a time (run/device_slots.h); the CPU
  // backend's shards share no device.
  std::map<std::string, std::string> slots_of_device;
  if (options.overrides.backend != "cpu") {
    std::map<std::string, int> workers;
    for (const auto& shard : shards) ++workers[shard.device];
    for (const auto& [device, sharing] : workers) {
      const int slots = device_slot_count(sharing, options.device_slots);
      if (slots > 0)
        slots_of_device[device] = make_device_slots(work_dir + "/slots-" + device, slots);
    }
  }

  // The host's cores shared out (core/host_threads.h) and, where several shards share a GPU, a
  // blocking wait for it (BITCHECK_CUDA_SYNC, kernels/common/runtime.cu); either variable set by
  // the user is left as it is.
  std::map<std::string, int> shards_of_device;
  for (const auto& shard : shards) ++shards_of_device[shard.device];
  // Shards of a device backend spend much of their time waiting for their GPU: twice the cores'
  // share each (on one H100 with 16 shards, 2 threads a shard gave the chain's references 167 s
  // of case time against 248 s with 1, 1416 s against 1458 s in all).
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency()),
                    waiting = options.overrides.backend == "cpu" ? 1 : 2;
  const std::string host_share = std::to_string(
      std::max<std::size_t>(1, waiting * cores / std::max<std::size_t>(1, shards.size())));
  for (auto& shard : shards) {
    std::vector<std::pair<std::string, std::string>> environment = {
        {"CUDA_VISIBLE_DEVICES", shard.device}};
    if (!std::getenv(host_threads_variable))
      environment.emplace_back(host_threads_variable, host_share);
    if (options.overrides.backend != "cpu" && shards_of_device[shard.device] > 1 &&
        !std::getenv("BITCHECK_CUDA_SYNC"))
      environment.emplace_back("BITCHECK_CUDA_SYNC", "blocking");
    if (options.overrides.backend != "cpu" && shards_of_device[shard.device] > 1)
      environment.emplace_back(shards_on_device_variable,
                               std::to_string(shards_of_device[shard.device]));
    auto slots = slots_of_device.find(shard.device);
    if (slots != slots_of_device.end())
      environment.emplace_back(device_slots_variable, slots->second);
    shard.pid = spawn_child(shard.args, environment, shard.log_path);
    if (options.progress) {
      printer.note("shard " + std::to_string(shard.index) + "/" + std::to_string(count) +
                   " on device " + shard.device + ": units from the shared queue (" +
                   std::to_string(plan.cases.size()) + " cases in " + std::to_string(unit_count) +
                   " units), log " + shard.log_path);
    }
  }

  const bool terminal = options.progress && printer.live();
  // A signal before the shards started: none started, and the report is marked interrupted.
  int forwarded = shards.empty() ? static_cast<int>(signals_received) : 0;
  std::size_t running = shards.size();
  auto last_note = std::chrono::steady_clock::now();
  while (running > 0) {
    if (signals_received > forwarded) {
      forwarded = signals_received;
      for (const auto& shard : shards) {
        if (!shard.done) kill(shard.pid, last_signal);
      }
    }
    for (auto& shard : shards) {
      if (shard.done) continue;
      int status = 0;
      if (waitpid(shard.pid, &status, WNOHANG) != shard.pid) continue;
      shard.done = true;
      --running;
      shard.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      shard.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options.progress) {
        printer.note("shard " + std::to_string(shard.index) + "/" + std::to_string(count) +
                     " on device " + shard.device + " finished: " + exit_text(shard.exit_code) +
                     " after " + std::to_string(static_cast<int>(shard.seconds + 0.5)) + " s");
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (running > 0 && options.progress &&
        (terminal || now - last_note > std::chrono::seconds(15))) {
      last_note = now;
      std::string line =
          "[devices] " + std::to_string(shards.size() - running) + "/" + std::to_string(count) +
          " shards done, " +
          std::to_string(static_cast<int>(std::chrono::duration<double>(now - start).count())) +
          " s";
      for (const auto& shard : shards) {
        if (!shard.done)
          line += " | " + std::to_string(shard.index) + ": " + latest_progress(shard.log_path);
      }
      if (terminal) {
        printer.progress(line);
      } else {
        printer.note(line);
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  printer.end_progress();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);

  for (const auto& shard : shards) {
    const std::string label = "shard " + std::to_string(shard.index) + "/" + std::to_string(count) +
                              " on device " + shard.device;
    if (!std::filesystem::exists(shard.report_path)) {
      missing.push_back(label);
      std::string tail = log_tail(shard.log_path, 10);
      if (!tail.empty() && tail.back() == '\n') tail.pop_back();
      printer.note("bitcheck: " + label + " wrote no report (" + exit_text(shard.exit_code) +
                   "); the end of its log " + shard.log_path + ":\n" + tail);
      continue;
    }
    reports.push_back(load_json_file(shard.report_path));
    sources.push_back(label);
  }
  if (reports.empty()) {
    printer.note("bitcheck: no shard wrote a report; logs are in " + work_dir);
    return exit_internal;
  }
  std::vector<std::string> op_order;
  for (const OpDef* op : registry.ops()) op_order.push_back(op->name);
  nlohmann::json merged = merge_reports(reports, sources, op_order);
  nlohmann::json& meta = merged["meta"];
  meta["argv"] = options.argv;
  std::string line;
  for (const auto& arg : options.argv) line += (line.empty() ? "" : " ") + arg;
  meta["command_line"] = line;
  meta["devices"] = options.devices;
  if (!rank_group_meta.is_null()) meta["rank_group"] = rank_group_meta;
  meta["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool interrupted = forwarded > 0 || !missing.empty() || meta.value("interrupted", false);
  meta["interrupted"] = interrupted;
  if (!missing.empty()) meta["missing_shards"] = missing;
  const std::string path = (std::filesystem::path(options.out_dir) / options.report_name).string();
  write_file_atomically(path, merged.dump(1) + "\n");
  if (missing.empty()) {
    std::filesystem::remove_all(work_dir, ignored);
  } else {
    printer.note("bitcheck: shard logs kept in " + work_dir);
  }

  const std::string held =
      std::to_string(merged["results"].size()) + " of " + std::to_string(plan.cases.size());
  printer.result(render_terminal_summary(merged, registry));
  printer.result("report: " + path + " (" + held + " cases, " + std::to_string(count) +
                 " shards on devices " + join(options.devices) + ", " +
                 std::to_string(static_cast<int>(meta["wall_seconds"].get<double>() + 0.5)) +
                 " s)\n");
  if (interrupted) {
    printer.note("bitcheck: " +
                 (forwarded > 0 ? "interrupted by signal " + std::to_string(last_signal)
                                : std::string("a shard failed")) +
                 "; the report holds " + held + " cases and is marked interrupted");
    return exit_internal;
  }
  return judge_coverage(options, merged, merged["summary"]["exit_code"].get<int>());
}

}  // namespace bitcheck
