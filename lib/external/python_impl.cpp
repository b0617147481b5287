// Python impls (--py-impl module:function): one `python3 -m bitcheck_py` worker per process,
// started on first use, answering length-prefixed JSON messages on its stdin/stdout
// (external/python_protocol.h). On the CPU the tensors of a call travel through one POSIX
// shared-memory buffer that the worker maps as numpy arrays; on a device they stay in device
// allocations (DeviceStaging) that the worker opens through CUDA IPC and wraps as torch tensors
// (DLPack), so nothing is copied between the processes. python/bitcheck_py maps bitcheck's call
// (slots, pads) onto PyTorch conventions and back.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/backend.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "external/external_device.h"
#include "external/plugin_loader.h"
#include "external/python_protocol.h"

#ifndef BITCHECK_PYTHON_SOURCE_DIR
#define BITCHECK_PYTHON_SOURCE_DIR ""
#endif

namespace bitcheck {
namespace {

constexpr std::size_t tensor_alignment = 64;

std::string environment_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// One shared-memory buffer, grown (replaced) when a call needs more. Its name is unlinked as soon
// as the worker has mapped it (a reply saying "shm_mapped"), so a process that ends without
// running destructors (a killed sweep worker, a case that crashed) leaves nothing in /dev/shm; a
// new worker (after one died) gets the contents under a new name (relink). Names carry the pid, a
// generation and a random part, and a name that exists already is never reused (O_EXCL, retried):
// a segment left by an earlier process with the same pid had failed the call with EEXIST.
class SharedBuffer {
 public:
  ~SharedBuffer() { release(); }
  void ensure(std::size_t bytes) {
    if (bytes <= size_) return;
    release();
    map_new(bytes);
  }
  // The worker has mapped the current name: nothing needs it any more.
  void mapped_by_worker() {
    if (!linked_) return;
    ::shm_unlink(name_.c_str());
    linked_ = false;
  }
  // A new worker opens segments by name: the current contents under a new, linked name, mapped at
  // the same address (MAP_FIXED), so pointers into the buffer that a caller holds stay valid.
  void relink() {
    if (!data_ || linked_) return;
    const int fd = open_new(size_);
    for (std::size_t done = 0; done < size_;) {
      const ssize_t n = ::pwrite(fd, data_ + done, size_ - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = errno;
        ::close(fd);
        ::shm_unlink(name_.c_str());
        throw std::runtime_error("write " + name_ + ": " + std::strerror(error));
      }
      done += static_cast<std::size_t>(n);
    }
    void* mapped = ::mmap(data_, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapped != data_) {
      ::shm_unlink(name_.c_str());
      throw std::runtime_error("mmap " + name_ + ": " + std::strerror(error));
    }
    linked_ = true;
  }
  unsigned char* data() { return data_; }
  const std::string& name() const { return name_; }
  std::size_t size() const { return size_; }

 private:
  // A new segment of `bytes` under a new name, open: its descriptor.
  int open_new(std::size_t bytes) {
    static int generation = 0;
    static std::mt19937_64 random{std::random_device{}()};
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
      std::ostringstream name;
      name << "/bitcheck-" << ::getpid() << "-" << ++generation << "-" << std::hex
           << (random() & 0xffffffffu);
      name_ = name.str();
      fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) throw std::runtime_error("shm_open " + name_ + ": " + std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int error = errno;
      ::close(fd);
      ::shm_unlink(name_.c_str());
      throw std::runtime_error("ftruncate " + name_ + ": " + std::strerror(error));
    }
    return fd;
  }
  void map_new(std::size_t bytes) {
    const int fd = open_new(bytes);
    void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) {
      ::shm_unlink(name_.c_str());
      throw std::runtime_error("mmap " + name_ + ": " + std::strerror(error));
    }
    data_ = static_cast<unsigned char*>(mapped);
    size_ = bytes;
    linked_ = true;
  }
  void release() {
    if (!data_) return;
    ::munmap(data_, size_);
    if (linked_) ::shm_unlink(name_.c_str());
    data_ = nullptr;
    size_ = 0;
    linked_ = false;
  }
  std::string name_;
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;
};

// Set once the worker object below is destroyed (static destruction): an impl destroyed after it
// (a registry that outlives it, as in tests) has nothing left to tell the worker, which is gone.
bool python_worker_gone = false;

// The worker process and its pipes. A worker that dies is restarted on the next request.
class PythonWorker {
 public:
  ~PythonWorker() {
    stop();
    python_worker_gone = true;
  }

  // A message naming the shared buffer ("shm") names it as it is when sent: a worker started here
  // gets it relinked under a new name.
  nlohmann::json request(const nlohmann::json& message) {
    if (pid_ < 0) {
      start();
      shared_.relink();
    }
    const bool names_buffer = message.contains("shm");
    std::string frame;
    if (names_buffer && message["shm"] != shared_.name()) {
      nlohmann::json renamed = message;
      renamed["shm"] = shared_.name();
      frame = python_protocol::encode_frame(renamed);
    } else {
      frame = python_protocol::encode_frame(message);
    }
    unsigned char header[4];
    std::string reply;
    if (write_all(frame.data(), frame.size()) && read_all(header, 4)) {
      const std::uint32_t reply_length = python_protocol::frame_length(header);
      reply.resize(reply_length);
      if (read_all(reply.data(), reply_length)) {
        nlohmann::json parsed =
            parse_json_text(reply, "the reply of the Python worker (" + command_ + ")");
        // The worker says when it holds a mapping of the buffer (not when the call failed
        // before it opened it, as for a module that does not import).
        if (names_buffer && parsed.value("shm_mapped", false)) shared_.mapped_by_worker();
        return parsed;
      }
    }
    const std::string how = reap();
    throw std::runtime_error("the Python worker (" + command_ + ") " + how +
                             " before it answered; its stderr is above");
  }
  SharedBuffer& shared() { return shared_; }

 private:
  void start() {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    const std::string python = environment_or("BITCHECK_PYTHON", "python3");
    command_ = python + " -m bitcheck_py";
    const std::string path = package_directory();
    const char* existing = std::getenv("PYTHONPATH");
    // The user's modules are found from the working directory, as `python3 -m` would.
    std::string python_path =
        path + ":" + (existing && *existing ? std::string(existing) + ":" : "") + ".";
    std::vector<std::string> args = {python, "-m", "bitcheck_py", "worker"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed sweep worker takes its Python worker along
      if (::getppid() != parent) ::_exit(127);
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::setenv("PYTHONPATH", python_path.c_str(), 1);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_worker_ = to_child[1];
    from_worker_ = from_child[0];
    pid_ = child;
  }
  // Where bitcheck_py is: BITCHECK_PYTHON_DIR, else the source tree's python/ this binary was
  // built from, else python/ beside the binary's directory (a bundle: bin/bitcheck, python/).
  static std::string package_directory() {
    const std::string chosen = environment_or("BITCHECK_PYTHON_DIR", "");
    if (!chosen.empty()) return chosen;
    std::error_code ignored;
    const std::string source = BITCHECK_PYTHON_SOURCE_DIR;
    if (!source.empty() && std::filesystem::exists(source + "/bitcheck_py", ignored)) return source;
    const std::filesystem::path beside =
        std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path().parent_path() /
        "python";
    return std::filesystem::exists(beside / "bitcheck_py", ignored) ? beside.string() : source;
  }
  bool write_all(const void* data, std::size_t bytes) {
    const auto* bytes_left = static_cast<const char*>(data);
    while (bytes > 0) {
      ssize_t n = ::write(to_worker_, bytes_left, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes_left += n;
      bytes -= static_cast<std::size_t>(n);
    }
    return true;
  }
  bool read_all(void* data, std::size_t bytes) {
    auto* into = static_cast<char*>(data);
    while (bytes > 0) {
      ssize_t n = ::read(from_worker_, into, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      into += n;
      bytes -= static_cast<std::size_t>(n);
    }
    return true;
  }
  std::string reap() {
    if (pid_ < 0) return "was not running";
    ::close(to_worker_);
    ::close(from_worker_);
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    return "ended (wait status " + std::to_string(status) + ")";
  }
  void stop() {
    if (pid_ >= 0) reap();
  }

  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
  std::string command_;
  SharedBuffer shared_;
};

PythonWorker& python_worker() {
  static PythonWorker worker;
  return worker;
}

class PythonImpl : public Impl {
 public:
  PythonImpl(ImplInfo info, std::string function, const OpDef& op, const DeviceBackend* device)
      : Impl(std::move(info)), function_(std::move(function)), op_(op), device_(device) {}
  ~PythonImpl() override {
    // The worker closes what it opened before bitcheck frees it.
    if (staging_ && !python_worker_gone && !staging_->exported_handles().empty()) {
      try {
        python_worker().request({{"type", "close"},
                                 {"device", python_protocol::device_block(
                                                memory().handle_kind(), memory().device_index(),
                                                staging_->exported_handles())}});
      } catch (const std::exception&) {
        // A worker that is gone has nothing open.
      }
    }
  }
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (auto reason = dtype_skip_reason(spec, "Python impl's")) return reason;
    if (backend() != "cpu" && !(device_ && device_->external_memory())) {
      return "the " + backend() + " backend has no device memory for Python impls";
    }
    return std::nullopt;
  }

  void run(Batch& batch) override {
    if (backend() == "cpu") return run_on_host(batch);
    // Device: the tensors stay in bitcheck's device allocations; the worker opens them (once per
    // allocation), runs the function, writes the outputs there and synchronizes before it replies.
    const std::vector<TensorDecl> decls = op_.tensors(*batch.spec);
    if (!staging_) staging_ = std::make_unique<DeviceStaging>(memory());
    std::vector<StagedTensor> staged = staging_->stage(batch, decls);  // waits for the uploads
    nlohmann::json tensors = nlohmann::json::array();
    for (const StagedTensor& tensor : staged) {
      tensors.push_back(python_protocol::device_tensor_entry(
          tensor, staging_->handle(tensor), staging_->allocation_of(tensor).bytes));
    }
    nlohmann::json call = python_protocol::call_request(function_, batch, std::move(tensors));
    call["device"] = python_protocol::device_block(memory().handle_kind(), memory().device_index(),
                                                   staging_->retired_handles());
    nlohmann::json reply;
    try {
      reply = python_worker().request(call);
    } catch (...) {
      staging_->release_retired();  // a worker that died closed everything
      throw;
    }
    staging_->release_retired();
    check(reply);
    record_worker_kernels(reply);
    staging_->download_outputs(batch, staged);
  }

  // Device impls of ops over independent rows: the worker times the function on spec.rows rows
  // of random inputs with CUDA events (warm-up, median of repeats, input sets rotated so together
  // they exceed the caches). The function's own allocations are timed; the copy of its result
  // into bitcheck's buffer is not.
  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    if (backend() == "cpu" || op_.make_layout || !device_ || !device_->external_memory())
      return std::nullopt;
    const std::vector<TensorDecl> decls = op_.tensors(spec);
    const std::size_t set_bytes = benchmark_set_bytes(spec, decls);
    const std::size_t sets = benchmark_sets(set_bytes, settings, device_->free_memory_bytes());
    DeviceStaging staging(memory());
    nlohmann::json set_entries = nlohmann::json::array();
    for (const auto& tensors : staging.stage_random(spec, decls, sets)) {
      nlohmann::json entries = nlohmann::json::array();
      for (const StagedTensor& tensor : tensors) {
        entries.push_back(python_protocol::device_tensor_entry(
            tensor, staging.handle(tensor), staging.allocation_of(tensor).bytes));
      }
      set_entries.push_back(std::move(entries));
    }
    nlohmann::json reply = python_worker().request(python_protocol::bench_request(
        function_, spec, settings.warmup, settings.repeats,
        python_protocol::device_block(memory().handle_kind(), memory().device_index(), {}),
        std::move(set_entries)));
    check(reply);
    BenchMeasurement measurement;
    measurement.median_ms = reply.value("median_ms", 0.0);
    measurement.min_ms = reply.value("min_ms", 0.0);
    measurement.bytes_moved = static_cast<double>(set_bytes);
    measurement.flops = op_.bench_flops ? op_.bench_flops(spec) : 0.0;
    measurement.config = {{"rotated_sets", sets}, {"timer", reply.value("timer", std::string())}};
    return measurement;
  }

 private:
  ExternalDeviceMemory& memory() const { return *device_->external_memory(); }

  void check(const nlohmann::json& reply) const {
    if (reply.value("ok", false)) return;
    const std::string error = reply.value("error", std::string("no error text"));
    if (reply.value("capture_failed", false)) {
      throw CaptureUnsupported(name() + " cannot be captured by torch.cuda.graph: " + error);
    }
    throw std::runtime_error(name() + " failed: " + error);
  }

  // The kernels the worker's profiler saw the call launch ("kernels": [{name, grid, block,
  // shared_bytes}]), into the runner's recording.
  void record_worker_kernels(const nlohmann::json& reply) const {
    auto found = reply.find("kernels");
    if (found == reply.end()) return;
    JsonCursor kernels(*found, "the reply of the Python worker (" + function_ + ")", "$.kernels");
    for (const JsonCursor& entry : kernels.items()) {
      entry.allow_only({"name", "grid", "block", "shared_bytes"});
      KernelLaunch launch = kernel_launch_from_json(entry);
      launch.name = readable_kernel_name(launch.name);
      record_kernel(std::move(launch));
    }
  }

  // CPU: the tensors copied into one shared-memory buffer, the outputs copied back after.
  void run_on_host(Batch& batch) {
    const CaseSpec& spec = *batch.spec;
    PythonWorker& worker = python_worker();
    // The op's declared order is the order of the user function's arguments and results.
    struct Placed {
      TensorDecl decl;
      Tensor* tensor;
      std::size_t offset;
      bool output;
    };
    std::vector<Placed> placed;
    std::size_t bytes = 0;
    for (const TensorDecl& decl : op_.tensors(spec)) {
      const bool output =
          decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
      Tensor* tensor = nullptr;
      if (output) {
        tensor = &batch.out(decl.name);
      } else {
        tensor = const_cast<Tensor*>(&batch.in(decl.name));  // copied out, never written
      }
      placed.push_back({decl, tensor, bytes, output});
      bytes += (tensor->bytes() + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
    }
    worker.shared().ensure(std::max<std::size_t>(bytes, 1));
    unsigned char* base = worker.shared().data();
    nlohmann::json tensors = nlohmann::json::array();
    for (const Placed& p : placed) {
      std::memcpy(base + p.offset, p.tensor->data(), p.tensor->bytes());
      StagedTensor described;
      described.name = p.decl.name;
      described.role = p.decl.role;
      described.dtype = p.tensor->dtype();
      described.shape = p.tensor->shape();
      nlohmann::json entry = python_protocol::tensor_entry(described);
      entry["offset"] = p.offset;
      tensors.push_back(std::move(entry));
    }
    nlohmann::json call = python_protocol::call_request(function_, batch, std::move(tensors));
    call["shm"] = worker.shared().name();
    call["shm_bytes"] = worker.shared().size();
    check(worker.request(call));
    for (const Placed& p : placed) {
      if (p.output) std::memcpy(p.tensor->data(), base + p.offset, p.tensor->bytes());
    }
  }

  std::string function_;  // module:function
  const OpDef& op_;
  const DeviceBackend* device_;  // the backend of a device impl (nullptr on the CPU)
  std::unique_ptr<DeviceStaging> staging_;
};

}  // namespace

void register_python_impl(Registry& registry, const std::string& module_function) {
  const auto colon = module_function.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == module_function.size()) {
    throw BadInput("command line", "--py-impl", "module:function, got \"" + module_function + "\"");
  }
  // The worker names an undecorated function after the op it observes: the ops are the registry's.
  nlohmann::json ops = nlohmann::json::array();
  for (const OpDef* op : registry.ops()) ops.push_back(op->name);
  nlohmann::json reply;
  try {
    reply = python_worker().request(
        {{"type", "describe"}, {"function", module_function}, {"ops", std::move(ops)}});
  } catch (const std::exception& error) {
    throw BadInput(module_function, "--py-impl",
                   std::string("a Python worker that starts: ") + error.what());
  }
  if (!reply.value("ok", false)) {
    throw BadInput(module_function, "--py-impl",
                   "an importable function with its bitcheck_py declaration:\n" +
                       reply.value("error", std::string("")));
  }
  const std::string op_name = reply.value("op", std::string());
  const OpDef* op = registry.find_op(op_name);
  if (!op) throw BadInput(module_function, "op", "an op bitcheck has, got \"" + op_name + "\"");
  ImplInfo info;
  info.name = "py:" + module_function;
  info.backend = reply.value("backend", std::string("cpu"));
  if (info.backend != "cpu" && info.backend != "cuda") {
    throw BadInput(module_function, "backend", "cpu or cuda, got \"" + info.backend + "\"");
  }
  const bool invariant = reply.value("invariant", false);
  const bool library_default = reply.value("library_default", false);
  if (invariant && library_default) {
    throw BadInput(module_function, "library_default",
                   "an impl that is either invariant or a library default, not both");
  }
  info.kind = invariant         ? ImplKind::invariant
              : library_default ? ImplKind::library_default
                                : ImplKind::control;
  info.description =
      reply.value("description", std::string()) + " (Python " + module_function + ")";
  for (const auto& dtype : reply.value("dtypes", std::vector<std::string>{})) {
    auto parsed = parse_dtype(dtype);
    if (!parsed || !is_floating(*parsed)) {
      throw BadInput(module_function, "dtypes",
                     "dtypes bitcheck runs (fp32, bf16, fp16), got \"" + dtype + "\"");
    }
    info.dtypes.push_back(dtype);
  }
  if (info.dtypes.empty())
    throw BadInput(module_function, "dtypes", "at least one dtype (fp32, bf16, fp16)");
  info.passes.clear();
  for (const auto& pass_name : reply.value("passes", std::vector<std::string>{"forward"})) {
    auto pass = parse_pass(pass_name);
    if (!pass)
      throw BadInput(module_function, "passes",
                     "forward and/or backward, got \"" + pass_name + "\"");
    info.passes.push_back(*pass);
  }
  // On a device the worker captures the function's call with torch.cuda.graph (the graph layout);
  // one that cannot be captured is skipped there, with the reason the worker gives.
  info.graph_capturable = info.backend != "cpu";
  const DeviceBackend* device = registry.device_backend(info.backend);
  auto impl = std::make_unique<PythonImpl>(std::move(info), module_function, *op, device);
  if (registry.find_impl(op->name, impl->name())) return;
  registry.add_impl(op->name, std::move(impl));
}

}  // namespace bitcheck
