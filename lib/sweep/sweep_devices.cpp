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
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/json_input.h"
#include "external/plugin_loader.h"
#include "report/report.h"
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
                                    const std::string& report_name, const std::string& queue_path) {
  const SweepOverrides& o = options.overrides;
  std::vector<std::string> args = {binary, "sweep"};
  auto add = [&](const char* flag, const std::string& value) {
    args.push_back(flag);
    args.push_back(value);
  };
  if (!options.spec_path.empty()) add("--spec", options.spec_path);
  if (!options.contract_path.empty()) add("--contract", options.contract_path);
  if (!o.ops.empty()) add("--op", join(o.ops));
  if (!o.impls.empty()) add("--impl", join(o.impls));
  if (!o.dtypes.empty()) add("--dtype", join(o.dtypes));
  if (!o.passes.empty()) add("--pass", join(o.passes));
  if (!o.layouts.empty()) add("--layout", join(o.layouts));
  if (!o.batches.empty()) add("--batch", join(o.batches));
  if (!o.seeds.empty()) add("--seed", join(o.seeds));
  if (o.repeats) add("--repeats", std::to_string(*o.repeats));
  if (o.special_values) {
    std::ostringstream rate;
    rate.precision(17);
    rate << *o.special_values;
    add("--special-values-rate", rate.str());
  }
  if (o.ids) add("--ids", *o.ids);
  for (const auto& report : options.skip_done_reports) add("--skip-done", report);
  for (const auto& arg : external_impl_arguments()) args.push_back(arg);  // --plugin, --py-impl
  if (options.isolation == SweepOptions::Isolation::on) args.push_back("--isolate");
  if (options.isolation == SweepOptions::Isolation::off) args.push_back("--no-isolate");
  if (options.case_timeout_seconds > 0) {
    std::ostringstream limit;
    limit.precision(17);
    limit << options.case_timeout_seconds;
    add("--case-timeout", limit.str());
  }
  add("--backend", o.backend);
  add("--pins", options.run.pins);
  add("--max-cases", std::to_string(options.max_cases));
  if (options.confirmed) args.push_back("--yes");
  if (!options.progress) args.push_back("--no-progress");
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

// Starts the child in its own process group, so a terminal's Ctrl-C reaches only the parent, which
// forwards it once. Everything the child touches is prepared before fork.
pid_t spawn(Shard& shard) {
  std::vector<char*> argv;
  for (auto& arg : shard.args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string environment = shard.device;
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed for shard " + std::to_string(shard.index));
  if (pid == 0) {
    setpgid(0, 0);
    setenv("CUDA_VISIBLE_DEVICES", environment.c_str(), 1);
    int log = open(shard.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      close(log);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
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

std::string log_tail(const std::string& log_path, std::size_t lines) {
  std::ifstream log(log_path);
  std::vector<std::string> kept;
  for (std::string line; std::getline(log, line);) {
    kept.push_back(line);
    if (kept.size() > lines) kept.erase(kept.begin());
  }
  std::string text;
  for (const auto& line : kept) text += "    " + line + "\n";
  return text;
}

std::string exit_text(int exit_code) {
  return exit_code >= 0 ? "exit " + std::to_string(exit_code)
                        : "killed by signal " + std::to_string(-exit_code);
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

  // The shards share one queue of work units (case_units, most expensive first): each takes the
  // next when it finishes one, so they finish together however wrong the cost estimates are.
  const std::string queue_path = work_dir + "/queue";
  create_shard_queue(queue_path);
  const std::size_t unit_count = case_units(plan.cases, registry, count).size();

  std::vector<Shard> shards(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    Shard& shard = shards[static_cast<std::size_t>(i)];
    shard.index = i;
    shard.device = options.devices[static_cast<std::size_t>(i)];
    const std::string name = "shard-" + std::to_string(i);
    shard.report_path = work_dir + "/" + name + ".json";
    shard.log_path = work_dir + "/" + name + ".log";
    shard.args = shard_args(options, binary.empty() ? options.argv.front() : binary, i, count,
                            work_dir, name + ".json", queue_path);
  }

  signals_received = 0;
  std::signal(SIGINT, on_parent_signal);
  std::signal(SIGTERM, on_parent_signal);
  for (auto& shard : shards) {
    shard.pid = spawn(shard);
    if (options.progress) {
      printer.note("shard " + std::to_string(shard.index) + "/" + std::to_string(count) +
                   " on device " + shard.device + ": units from the shared queue (" +
                   std::to_string(plan.cases.size()) + " cases in " + std::to_string(unit_count) +
                   " units), log " + shard.log_path);
    }
  }

  const bool terminal = options.progress && printer.live();
  int forwarded = 0;
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

  std::vector<nlohmann::json> reports;
  std::vector<std::string> sources, missing;
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
