// Kernel launches: their text, tallies by layout, the thread's recording and the kernel-sequence
// path of impls that declare none.
#include "core/provenance.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace bitcheck {

namespace {
thread_local KernelRecording* current_recording = nullptr;

std::string dims_text(const std::array<std::int64_t, 3>& dims) {
  return "(" + std::to_string(dims[0]) + "," + std::to_string(dims[1]) + "," +
         std::to_string(dims[2]) + ")";
}
}  // namespace

std::string readable_kernel_name(const std::string& symbol) {
  std::string name = symbol;
  int status = -1;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  if (status == 0 && demangled) name = demangled.get();
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  if (name.empty() || name.back() != ')') return name;
  int depth = 0;  // the parameter list: the parenthesized group that ends the name
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) return i == 0 ? name : name.substr(0, i);
  }
  return name;
}

nlohmann::json kernel_launch_to_json(const KernelLaunch& launch) {
  nlohmann::json entry = {{"name", launch.name},
                          {"grid", launch.grid},
                          {"block", launch.block},
                          {"shared_bytes", launch.shared_bytes}};
  if (launch.dynamic_shared_bytes >= 0) entry["dynamic_shared_bytes"] = launch.dynamic_shared_bytes;
  return entry;
}

KernelLaunch kernel_launch_from_json(const JsonCursor& entry) {
  auto dims_of = [](const JsonCursor& dims) -> std::array<std::int64_t, 3> {
    const std::vector<JsonCursor> items = dims.items();
    if (items.size() != 3) dims.fail("three dimensions [x, y, z]");
    return {items[0].as_int(1, INT64_MAX), items[1].as_int(1, INT64_MAX),
            items[2].as_int(1, INT64_MAX)};
  };
  KernelLaunch launch;
  launch.name = entry.at("name").as_string();
  launch.grid = dims_of(entry.at("grid"));
  launch.block = dims_of(entry.at("block"));
  launch.shared_bytes = entry.at("shared_bytes").as_int(0, INT64_MAX);
  if (auto dynamic = entry.find("dynamic_shared_bytes"))
    launch.dynamic_shared_bytes = dynamic->as_int(0, INT64_MAX);
  return launch;
}

bool operator==(const KernelLaunch& a, const KernelLaunch& b) {
  return a.name == b.name && a.grid == b.grid && a.block == b.block &&
         a.shared_bytes == b.shared_bytes && a.dynamic_shared_bytes == b.dynamic_shared_bytes;
}

std::string launch_text(const KernelLaunch& launch) {
  std::string text = launch.name + "<<<" + dims_text(launch.grid) + ", " + dims_text(launch.block) +
                     ", shared " + std::to_string(launch.shared_bytes);
  if (launch.dynamic_shared_bytes >= 0)
    text += " (dynamic " + std::to_string(launch.dynamic_shared_bytes) + ")";
  return text + ">>>";
}

void tally_kernels(const std::vector<KernelLaunch>& launches, std::vector<KernelUse>& uses) {
  for (const KernelLaunch& launch : launches) {
    auto seen = std::find_if(uses.begin(), uses.end(),
                             [&](const KernelUse& use) { return use.launch == launch; });
    if (seen != uses.end()) {
      ++seen->calls;
      continue;
    }
    uses.push_back({launch, 1});
  }
}

std::vector<std::string> kernel_names(const std::vector<KernelUse>& uses) {
  std::vector<std::string> names;
  for (const KernelUse& use : uses) {
    if (std::find(names.begin(), names.end(), use.launch.name) == names.end())
      names.push_back(use.launch.name);
  }
  return names;
}

void record_kernel(KernelLaunch launch) {
  if (current_recording) current_recording->add(std::move(launch));
}

bool kernels_wanted() {
  return current_recording && current_recording->wanted();
}

KernelRecording::KernelRecording(bool wanted) : wanted_(wanted), outer_(current_recording) {
  current_recording = this;
}
KernelRecording::~KernelRecording() {
  current_recording = outer_;
}

PathDecl kernel_sequence_declaration() {
  return PathDecl(kernel_sequence_family,
                  "the kernels a call launched, by name in launch order (recorded with "
                  "--provenance for an impl that declares no choice among paths)")
      .as_family()
      .informative();
}

std::string kernel_sequence_path(const std::vector<KernelLaunch>& launches) {
  std::string sequence;
  for (std::size_t i = 0; i < launches.size();) {
    std::size_t run = 1;
    while (i + run < launches.size() && launches[i + run].name == launches[i].name) ++run;
    sequence += (sequence.empty() ? "" : " + ") + launches[i].name;
    if (run > 1) sequence += " (x" + std::to_string(run) + ")";
    i += run;
  }
  if (sequence.empty()) return sequence;
  return std::string(kernel_sequence_family) + ":" + sequence;
}

}  // namespace bitcheck
