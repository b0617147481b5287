// Kernel provenance: the kernels each call of an impl launched (name, grid, block, shared memory),
// from a backend's KernelRecorder (CUPTI on CUDA) or from the impl itself (a Python worker's
// profiler), so a report says which kernels every layout ran. No CUDA here: a backend implements
// KernelRecorder, the runner and the impls speak only of KernelLaunch.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/json_input.h"
#include "core/paths.h"

namespace bitcheck {

struct KernelLaunch {
  std::string name;  // demangled, without its return type and parameter list
  std::array<std::int64_t, 3> grid = {1, 1, 1};
  std::array<std::int64_t, 3> block = {1, 1, 1};
  std::int64_t shared_bytes = 0;  // shared memory per block, static and dynamic
  // The dynamic part, or -1 where the source gives only the sum (torch.profiler).
  std::int64_t dynamic_shared_bytes = -1;
};
bool operator==(const KernelLaunch& a, const KernelLaunch& b);
// "name<<<(gx,gy,gz), (bx,by,bz), shared S (dynamic D)>>>".
std::string launch_text(const KernelLaunch& launch);

// A kernel's name as a report shows it: demangled when `symbol` is a mangled C++ name, without
// the return type and the parameter list ("void ns::k<float>(float*, int)" -> "ns::k<float>").
std::string readable_kernel_name(const std::string& symbol);

// A launch as JSON ({name, grid, block, shared_bytes, dynamic_shared_bytes where known}) and
// back: the report's entries and a Python worker's reply. A wrong field is BadInput at its path.
nlohmann::json kernel_launch_to_json(const KernelLaunch& launch);
KernelLaunch kernel_launch_from_json(const JsonCursor& entry);

// One distinct launch (name, grid, block, shared memory) of a layout and how often it ran.
struct KernelUse {
  KernelLaunch launch;
  std::int64_t calls = 0;
};
// Adds `launches` to `uses`: a launch seen before counts one more call, a new one is appended, so
// `uses` keeps the order in which the layout first ran each.
void tally_kernels(const std::vector<KernelLaunch>& launches, std::vector<KernelUse>& uses);
// The distinct kernel names of `uses`, in order.
std::vector<std::string> kernel_names(const std::vector<KernelUse>& uses);

// Adds a launch to the innermost KernelRecording on this thread; a no-op outside one.
void record_kernel(KernelLaunch launch);
// Whether the innermost recording on this thread asks for kernels (an impl that pays to collect
// them, a Python worker's profiler, asks first); false outside one.
bool kernels_wanted();

// Collects the launches recorded on this thread while it lives (the innermost one collects).
class KernelRecording {
 public:
  explicit KernelRecording(bool wanted);
  ~KernelRecording();
  KernelRecording(const KernelRecording&) = delete;
  KernelRecording& operator=(const KernelRecording&) = delete;
  bool wanted() const { return wanted_; }
  void add(KernelLaunch launch) { launches_.push_back(std::move(launch)); }
  const std::vector<KernelLaunch>& launches() const { return launches_; }

 private:
  bool wanted_;
  std::vector<KernelLaunch> launches_;
  KernelRecording* outer_;
};

// A backend's source of kernel records (kernels/common/kernel_recorder_cuda.cpp: CUPTI's activity
// records). The runner begins each call of an impl of that backend and takes what it holds after
// it, so what the take returns is what the call launched.
class KernelRecorder {
 public:
  virtual ~KernelRecorder() = default;
  // Turns recording on for the run (--provenance). Returns why it cannot (CUPTI absent), or nullopt
  // once it records.
  virtual std::optional<std::string> start() = 0;
  virtual void stop() = 0;
  virtual bool recording() const = 0;
  // Why recording is off (not asked for, or the reason start() gave).
  virtual std::string off_reason() const = 0;
  // The kernels launched since the last take or begin, in launch order (waits for the device
  // first).
  virtual std::vector<KernelLaunch> take() = 0;
  // Starts a call: the next take returns only what is launched from here on. By default a take
  // whose launches are dropped; a recorder that can tell earlier launches apart without waiting
  // for the device does that instead.
  virtual void begin() { take(); }
};

// The path family of an impl that declares no choice among paths (Impl::records_kernel_sequences):
// each call records the names of the kernels it launched, in order, as one member
// ("kernels:gemm_a + splitk_reduce"), so coverage and crossings show where a library or a function
// from outside switched kernels.
inline constexpr const char* kernel_sequence_family = "kernels";
PathDecl kernel_sequence_declaration();
// The member a call with `launches` records (the names in launch order, " + " between), or "" when
// it launched none.
std::string kernel_sequence_path(const std::vector<KernelLaunch>& launches);

}  // namespace bitcheck
