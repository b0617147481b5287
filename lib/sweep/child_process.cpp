// Child sweeps: their command line, their environment, starting them, reading their logs.
#include "sweep/child_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "external/plugin_loader.h"

namespace bitcheck {
namespace {

template <typename T>
std::string join(const std::vector<T>& values) {
  std::ostringstream text;
  for (std::size_t i = 0; i < values.size(); ++i) text << (i ? "," : "") << values[i];
  return text.str();
}

std::string exact(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

}  // namespace

std::vector<std::string> sweep_child_args(const SweepOptions& options, const std::string& binary) {
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
  if (!o.tps.empty()) add("--tp", join(o.tps));
  if (o.repeats) add("--repeats", std::to_string(*o.repeats));
  if (o.special_values) add("--special-values-rate", exact(*o.special_values));
  if (o.ids) add("--ids", *o.ids);
  for (const auto& report : options.skip_done_reports) add("--skip-done", report);
  if (!options.costs_report.empty()) add("--costs", options.costs_report);
  for (const auto& arg : external_impl_arguments()) args.push_back(arg);  // --plugin, --py-impl
  if (options.case_timeout_seconds > 0) add("--case-timeout", exact(options.case_timeout_seconds));
  add("--backend", o.backend);
  add("--pins", options.run.pins);
  if (options.run.provenance) args.push_back("--provenance");
  add("--max-cases", std::to_string(options.max_cases));
  if (options.confirmed) args.push_back("--yes");
  return args;
}

std::vector<std::pair<std::string, std::string>> multi_gpu_safe_environment() {
  return {{"NCCL_NVLS_ENABLE", "0"},
          {"NCCL_COLLNET_ENABLE", "0"},
          {"NVSHMEM_DISABLE_NVLS", "1"},
          {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}};
}

pid_t spawn_child(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& environment,
                  const std::string& log_path) {
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  for (auto& arg : owned) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The child's environment, built here: between fork and exec the child calls only what is safe
  // in a process that other threads of the parent may have left mid-allocation (groups of ranks
  // are started from several threads at once).
  std::vector<std::string> entries;
  for (char** variable = environ; *variable; ++variable) {
    const std::string entry = *variable;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [override_name, value] : environment) replaced |= override_name == name;
    if (!replaced) entries.push_back(entry);
  }
  for (std::size_t i = 0; i < environment.size(); ++i) {  // a name given twice: the last value
    bool later = false;
    for (std::size_t j = i + 1; j < environment.size(); ++j)
      later |= environment[j].first == environment[i].first;
    if (!later) entries.push_back(environment[i].first + "=" + environment[i].second);
  }
  std::vector<char*> envp;
  for (auto& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed for " + log_path);
  if (pid == 0) {
    setpgid(0, 0);
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      close(log);
    }
    execvpe(argv[0], argv.data(), envp.data());  // a launcher (srun) is found on PATH
    _exit(127);
  }
  return pid;
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

}  // namespace bitcheck
