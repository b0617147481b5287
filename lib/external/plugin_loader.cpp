// C ABI plugins: dlopen, the ABI version check, the registrar callbacks that validate each impl a
// plugin declares, and the adapter that runs a plugin impl on a Batch. The CPU adapter copies
// nothing: the Batch's tensors are handed to the plugin by pointer. A device impl (backend cuda)
// gets device copies placed by DeviceStaging through the backend's ExternalDeviceMemory (lib/
// never calls CUDA itself), the backend's stream, and its outputs downloaded after the stream is
// done.
#include "external/plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "bitcheck/plugin.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "external/external_device.h"

namespace bitcheck {
namespace {

ExternalImpls& loaded() {
  static ExternalImpls impls;
  return impls;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// How bitcheck calls one plugin impl, copied out of the plugin's descriptor (what the impl is,
// its ImplInfo, comes from the same descriptor).
struct PluginEntry {
  std::size_t workspace_bytes = 0;
  bitcheck_run_fn run = nullptr;
  void* user_data = nullptr;
};

// The C ABI description of one call and the storage its pointers point into (filled in place:
// it never moves).
struct PluginCall {
  std::vector<bitcheck_dim> dims;
  std::vector<std::string> dtype_names;
  std::vector<bitcheck_tensor> tensors;
  std::vector<bitcheck_segment> segments;
  std::string pass;
  char error[1024] = {0};
  bitcheck_call call{};

  PluginCall() = default;
  PluginCall(const PluginCall&) = delete;
  PluginCall& operator=(const PluginCall&) = delete;
};

// Fills `out` for one invocation: the tensors in the op's declared order, `data` host pointers
// on the CPU and device pointers on a device (the slot map and the segments are host memory on
// every backend).
void describe_call(const CaseSpec& spec, const std::vector<StagedTensor>& tensors,
                   const std::vector<std::int64_t>& slot_rows, const std::vector<Segment>& segments,
                   std::int64_t invocation_index, std::int64_t invocation_count,
                   bool reductions_wanted, PluginCall& out) {
  for (const auto& [dim_name, value] : spec.dims) out.dims.push_back({dim_name.c_str(), value});
  out.dtype_names.reserve(tensors.size());
  for (const StagedTensor& tensor : tensors) {
    out.dtype_names.push_back(to_string(tensor.dtype));
    std::int64_t count = 1;
    for (std::int64_t extent : tensor.shape) count *= extent;
    bitcheck_tensor described{};
    described.name = tensor.name.c_str();
    described.data = tensor.data;
    described.dtype = out.dtype_names.back().c_str();
    described.role = static_cast<int32_t>(tensor.role);
    described.ndim = static_cast<int32_t>(tensor.shape.size());
    described.shape = tensor.shape.data();
    described.rows = tensor.shape.empty() ? 1 : tensor.shape[0];
    described.row_stride = described.rows == 0 ? 0 : count / described.rows;
    out.tensors.push_back(described);
  }
  for (const Segment& segment : segments) {
    out.segments.push_back(
        {segment.sequence, segment.first_slot, segment.length, segment.start_position});
  }
  out.pass = to_string(spec.pass);
  bitcheck_call& call = out.call;
  call.op = spec.op.c_str();
  call.dtype = spec.dtype_name.c_str();
  call.pass = out.pass.c_str();
  call.dims = out.dims.data();
  call.dim_count = static_cast<int32_t>(out.dims.size());
  call.tensor_count = static_cast<int32_t>(out.tensors.size());
  call.tensors = out.tensors.data();
  call.slot_rows = slot_rows.data();
  call.slots = static_cast<int64_t>(slot_rows.size());
  call.segments = out.segments.data();
  call.segment_count = static_cast<int64_t>(out.segments.size());
  call.invocation_index = invocation_index;
  call.invocation_count = invocation_count;
  call.reductions_wanted = reductions_wanted ? 1 : 0;
  call.error = out.error;
  call.error_capacity = sizeof out.error;
}

// The Batch's own tensors, in the op's declared order, by host pointer (no copies).
std::vector<StagedTensor> host_tensors(Batch& batch, const std::vector<TensorDecl>& decls) {
  std::vector<StagedTensor> tensors;
  for (const TensorDecl& decl : decls) {
    const bool output =
        decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
    // Inputs are shared and immutable: the header tells plugins never to write them.
    Tensor& tensor = output ? batch.out(decl.name) : const_cast<Tensor&>(batch.in(decl.name));
    StagedTensor described;
    described.name = decl.name;
    described.role = decl.role;
    described.dtype = tensor.dtype();
    described.shape = tensor.shape();
    described.data = tensor.data();
    described.bytes = tensor.bytes();
    tensors.push_back(std::move(described));
  }
  return tensors;
}

class PluginImpl : public Impl {
 public:
  PluginImpl(ImplInfo info, PluginEntry entry, const OpDef& op, const DeviceBackend* device)
      : Impl(std::move(info)), entry_(entry), op_(op), device_(device) {}
  ~PluginImpl() override {
    staging_.reset();
    if (workspace_) device_->external_memory()->release(workspace_);
  }
  const std::string& op_name() const { return op_.name; }

  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (auto reason = dtype_skip_reason(spec, "plugin impl's")) return reason;
    if (backend() != "cpu" && !(device_ && device_->external_memory())) {
      return "the " + backend() + " backend has no device memory for plugin impls";
    }
    return std::nullopt;
  }
  std::size_t device_workspace_bytes(const CaseSpec&) const override {
    return entry_.workspace_bytes;
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const std::vector<TensorDecl> decls = op_.tensors(spec);
    const Invocation& invocation = *batch.invocation;
    if (backend() == "cpu") {
      std::vector<StagedTensor> tensors = host_tensors(batch, decls);
      std::vector<unsigned char> workspace(entry_.workspace_bytes);
      PluginCall call;
      describe_call(spec, tensors, invocation.slot_rows, invocation.segments,
                    batch.invocation_index, batch.invocation_count, batch.reductions_wanted, call);
      call.call.workspace = workspace.empty() ? nullptr : workspace.data();
      call.call.workspace_bytes = workspace.size();
      check(entry_.run(&call.call, entry_.user_data), call);
      return;
    }
    // A device impl: the tensors in device allocations (DeviceStaging), the call on the backend's
    // stream, waited for before anything is read back.
    ExternalDeviceMemory& memory = *device_->external_memory();
    if (!staging_) staging_ = std::make_unique<DeviceStaging>(memory);
    std::vector<StagedTensor> tensors = staging_->stage(batch, decls);
    PluginCall call;
    describe_call(spec, tensors, invocation.slot_rows, invocation.segments, batch.invocation_index,
                  batch.invocation_count, batch.reductions_wanted, call);
    prepare_device_call(memory, call);
    int status = BITCHECK_PLUGIN_OK;
    auto run_call = [&] { status = entry_.run(&call.call, entry_.user_data); };
    if (batch.captured) {
      run_captured(memory, run_call, status, call);
    } else {
      run_call();
    }
    memory.synchronize();  // the plugin's work done, or its device error thrown
    staging_->release_retired();
    check(status, call);
    staging_->download_outputs(batch, tensors);
  }

  // Device impls of ops over independent rows: `run` on spec.rows rows of random inputs, rotated
  // through sets larger than the caches, timed on the stream with CUDA events. Ops with their own
  // layouts (attention's sequences) and CPU impls have no benchmark.
  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    if (backend() == "cpu" || op_.make_layout || !device_ || !device_->external_memory())
      return std::nullopt;
    ExternalDeviceMemory& memory = *device_->external_memory();
    const std::vector<TensorDecl> decls = op_.tensors(spec);
    const std::size_t set_bytes = benchmark_set_bytes(spec, decls);
    const std::size_t sets = benchmark_sets(set_bytes, settings, device_->free_memory_bytes());
    DeviceStaging staging(memory);
    const auto tensor_sets = staging.stage_random(spec, decls, sets);
    std::vector<std::int64_t> slot_rows(static_cast<std::size_t>(spec.rows));
    std::iota(slot_rows.begin(), slot_rows.end(), 0);
    std::vector<std::unique_ptr<PluginCall>> calls;
    for (const auto& tensors : tensor_sets) {
      calls.push_back(std::make_unique<PluginCall>());
      describe_call(spec, tensors, slot_rows, {}, 0, 1, true, *calls.back());
      prepare_device_call(memory, *calls.back());
    }
    int failed_status = BITCHECK_PLUGIN_OK;
    PluginCall* failed = nullptr;
    const ExternalDeviceMemory::Timing timing =
        memory.time_launches(settings.warmup, settings.repeats, [&](int i) {
          PluginCall& call = *calls[static_cast<std::size_t>(i) % calls.size()];
          const int status = entry_.run(&call.call, entry_.user_data);
          if (status != BITCHECK_PLUGIN_OK && !failed) {
            failed_status = status;
            failed = &call;
          }
        });
    if (failed) check(failed_status, *failed);
    BenchMeasurement measurement;
    measurement.median_ms = timing.median_ms;
    measurement.min_ms = timing.min_ms;
    measurement.bytes_moved = static_cast<double>(set_bytes);
    measurement.flops = op_.bench_flops ? op_.bench_flops(spec) : 0.0;
    measurement.config = {{"rotated_sets", sets}};
    return measurement;
  }

 private:
  void prepare_device_call(ExternalDeviceMemory& memory, PluginCall& call) {
    if (entry_.workspace_bytes && !workspace_) workspace_ = memory.allocate(entry_.workspace_bytes);
    call.call.workspace = workspace_;
    call.call.workspace_bytes = workspace_ ? entry_.workspace_bytes : 0;
    call.call.stream = memory.stream();
  }

  // The graph layout: the call captured on the plugin's stream and replayed. A capture that fails
  // names the plugin and what its run said.
  void run_captured(ExternalDeviceMemory& memory, const std::function<void()>& run_call,
                    const int& status, PluginCall& call) const {
    try {
      memory.run_captured(run_call);
    } catch (const CaptureUnsupported& failed) {
      call.error[sizeof call.error - 1] = '\0';
      const std::string said = status == BITCHECK_PLUGIN_OK || !call.error[0]
                                   ? ""
                                   : std::string("; its run returned: ") + call.error;
      throw CaptureUnsupported(name() + " under CUDA graph capture: " + failed.what() + said);
    }
  }

  void check(int status, PluginCall& call) const {
    if (status == BITCHECK_PLUGIN_OK) return;
    call.error[sizeof call.error - 1] = '\0';
    throw std::runtime_error(name() + " run returned status " + std::to_string(status) + ": " +
                             (call.error[0] ? call.error : "(no message)"));
  }

  PluginEntry entry_;
  const OpDef& op_;
  const DeviceBackend* device_;  // the backend of a device impl (nullptr on the CPU)
  std::unique_ptr<DeviceStaging> staging_;
  void* workspace_ = nullptr;  // a device impl's workspace, allocated on first use
};

// The registrar's host side for one plugin being loaded. Callbacks cannot throw across the C
// boundary: the first problem is kept and thrown once bitcheck_plugin_register returns.
struct LoadingPlugin {
  Registry* registry = nullptr;
  std::string path;
  std::string name;
  bool declared = false;
  std::optional<BadInput> problem;
  std::vector<std::unique_ptr<PluginImpl>> impls;

  void fail(const std::string& field, const std::string& expected) {
    if (!problem) problem.emplace(path, field, expected);
  }
};

int declare_plugin(void* host, uint32_t abi_version, const char* plugin_name) {
  auto& plugin = *static_cast<LoadingPlugin*>(host);
  if (abi_version != BITCHECK_PLUGIN_ABI_VERSION) {
    plugin.fail("abi_version", std::to_string(BITCHECK_PLUGIN_ABI_VERSION) +
                                   " (BITCHECK_PLUGIN_ABI_VERSION of this bitcheck), got " +
                                   std::to_string(abi_version) +
                                   ": rebuild the plugin against this include/bitcheck/plugin.h");
    return 1;
  }
  const std::string name = plugin_name ? plugin_name : "";
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!valid) {
    plugin.fail("plugin_name",
                "a non-empty name of letters, digits, '_', '-' or '.', got \"" + name + "\"");
    return 1;
  }
  plugin.name = name;
  plugin.declared = true;
  return 0;
}

int add_plugin_impl(void* host, const bitcheck_impl_desc* desc) {
  auto& plugin = *static_cast<LoadingPlugin*>(host);
  if (plugin.problem) return 1;
  if (!plugin.declared) {
    plugin.fail("declare", "a successful registrar->declare(...) before add_impl");
    return 1;
  }
  if (!desc) {
    plugin.fail("add_impl", "an impl descriptor, got NULL");
    return 1;
  }
  auto text = [](const char* value) { return std::string(value ? value : ""); };
  const std::string name = text(desc->name), op_name = text(desc->op);
  const std::string field = "impl \"" + name + "\" field ";
  if (name.empty() || name.find_first_of(" /\t\n") != std::string::npos) {
    plugin.fail(field + "name", "a non-empty impl name without spaces or '/'");
    return 1;
  }
  const OpDef* op = plugin.registry->find_op(op_name);
  if (!op) {
    std::string known;
    for (const OpDef* candidate : plugin.registry->ops())
      known += (known.empty() ? "" : ", ") + candidate->name;
    plugin.fail(field + "op", "an op bitcheck has (" + known + "), got \"" + op_name + "\"");
    return 1;
  }
  ImplInfo info;
  info.name = "plugin:" + plugin.name + "/" + name;
  info.backend = text(desc->backend);
  if (info.backend != "cpu" && info.backend != "cuda") {
    plugin.fail(field + "backend", "cpu or cuda, got \"" + info.backend + "\"");
    return 1;
  }
  info.dtypes = split_list(text(desc->dtypes));
  if (info.dtypes.empty()) {
    plugin.fail(field + "dtypes", "at least one dtype (fp32, bf16, fp16)");
    return 1;
  }
  for (const auto& dtype : info.dtypes) {
    auto parsed = parse_dtype(dtype);
    if (!parsed || !is_floating(*parsed)) {
      plugin.fail(field + "dtypes",
                  "dtypes bitcheck runs (fp32, bf16, fp16), got \"" + dtype + "\"");
      return 1;
    }
  }
  info.passes.clear();
  for (const auto& pass_name : split_list(text(desc->passes))) {
    auto pass = parse_pass(pass_name);
    if (!pass || (*pass == Pass::backward && !op->has_backward)) {
      plugin.fail(field + "passes",
                  std::string(op->has_backward ? "forward and/or backward"
                                               : "forward (" + op->name + " has no backward)") +
                      ", got \"" + pass_name + "\"");
      return 1;
    }
    info.passes.push_back(*pass);
  }
  if (info.passes.empty()) {
    plugin.fail(field + "passes", "at least one pass (forward, backward)");
    return 1;
  }
  if (!desc->run) {
    plugin.fail(field + "run", "a run callback, got NULL");
    return 1;
  }
  info.description = text(desc->description) + " (plugin " + plugin.path + ")";
  info.kind = desc->claims_invariance != 0 ? ImplKind::invariant : ImplKind::control;
  // A device plugin queues its work on call->stream: the graph layout captures that stream (a
  // plugin that launches elsewhere or synchronizes is skipped there, with the reason).
  info.graph_capturable = info.backend != "cpu";
  const PluginEntry entry{desc->workspace_bytes, desc->run, desc->user_data};
  const DeviceBackend* device = plugin.registry->device_backend(info.backend);
  auto impl = std::make_unique<PluginImpl>(std::move(info), entry, *op, device);
  const bool duplicate =
      plugin.registry->find_impl(op->name, impl->name()) ||
      std::any_of(plugin.impls.begin(), plugin.impls.end(),
                  [&](const auto& other) { return other->name() == impl->name(); });
  if (duplicate) {
    plugin.fail(field + "name",
                "an impl name not registered before, got \"" + impl->name() + "\" twice");
    return 1;
  }
  plugin.impls.push_back(std::move(impl));
  return 0;
}

void load_plugin(Registry& registry, const std::string& path) {
  // Never closed: the registry keeps pointers into the library until the process ends.
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    throw BadInput(
        path, "(file)",
        std::string("a shared library dlopen can load: ") + (why ? why : "unknown error"));
  }
  auto entry =
      reinterpret_cast<bitcheck_plugin_register_fn>(::dlsym(library, BITCHECK_PLUGIN_ENTRY));
  if (!entry) {
    throw BadInput(path, BITCHECK_PLUGIN_ENTRY,
                   "the exported symbol extern \"C\" int " BITCHECK_PLUGIN_ENTRY
                   "(const bitcheck_registrar*) (see include/bitcheck/plugin.h)");
  }
  LoadingPlugin plugin;
  plugin.registry = &registry;
  plugin.path = path;
  bitcheck_registrar registrar{BITCHECK_PLUGIN_ABI_VERSION, &plugin, declare_plugin,
                               add_plugin_impl};
  const int status = entry(&registrar);
  if (plugin.problem) throw *plugin.problem;
  if (!plugin.declared)
    throw BadInput(path, "declare", "a call to registrar->declare in " BITCHECK_PLUGIN_ENTRY);
  if (status != 0)
    throw BadInput(path, BITCHECK_PLUGIN_ENTRY, "return value 0, got " + std::to_string(status));
  if (plugin.impls.empty()) throw BadInput(path, "add_impl", "at least one impl registered");
  for (auto& impl : plugin.impls) {
    const std::string op = impl->op_name();
    registry.add_impl(op, std::move(impl));
  }
}

}  // namespace

void load_external_impls(Registry& registry, const ExternalImpls& impls) {
  for (const auto& path : impls.plugins) {
    std::error_code ignored;
    std::string absolute = std::filesystem::absolute(path, ignored).lexically_normal().string();
    if (absolute.empty()) absolute = path;
    if (contains(loaded().plugins, absolute)) continue;
    load_plugin(registry, absolute);
    loaded().plugins.push_back(absolute);
  }
  for (const auto& function : impls.py_impls) {
    if (contains(loaded().py_impls, function)) continue;
    register_python_impl(registry, function);
    loaded().py_impls.push_back(function);
  }
}

ExternalImpls external_impls_of_spec(const std::string& spec_path) {
  ExternalImpls impls;
  nlohmann::json document = load_json_file(spec_path);
  JsonCursor root(document, spec_path);
  if (!document.is_object()) return impls;  // the spec loader reports it
  const std::filesystem::path directory = std::filesystem::path(spec_path).parent_path();
  if (auto plugins = root.find("plugins")) {
    for (const auto& path : plugins->as_string_list()) {
      std::filesystem::path plugin(path);
      impls.plugins.push_back(plugin.is_absolute() ? path : (directory / plugin).string());
    }
  }
  if (auto py_impls = root.find("py_impls")) impls.py_impls = py_impls->as_string_list();
  return impls;
}

ExternalImpls external_impls_of_report(const std::string& report_path) {
  ExternalImpls impls;
  nlohmann::json document = load_json_file(report_path);
  JsonCursor root(document, report_path);
  auto meta = root.find("meta");
  if (!meta) return impls;
  if (auto plugins = meta->find("plugins")) impls.plugins = plugins->as_string_list();
  if (auto py_impls = meta->find("py_impls")) impls.py_impls = py_impls->as_string_list();
  return impls;
}

const ExternalImpls& loaded_external_impls() {
  return loaded();
}

std::vector<std::string> external_impl_arguments() {
  std::vector<std::string> arguments;
  for (const auto& path : loaded().plugins) arguments.insert(arguments.end(), {"--plugin", path});
  for (const auto& function : loaded().py_impls)
    arguments.insert(arguments.end(), {"--py-impl", function});
  return arguments;
}

void add_plugin_meta(nlohmann::json& meta) {
  meta["plugin_abi_version"] = BITCHECK_PLUGIN_ABI_VERSION;
  if (!loaded().plugins.empty()) meta["plugins"] = loaded().plugins;
  if (!loaded().py_impls.empty()) meta["py_impls"] = loaded().py_impls;
}

bool is_external_impl(const std::string& impl_name) {
  return impl_name.rfind("plugin:", 0) == 0 || impl_name.rfind("py:", 0) == 0;
}

}  // namespace bitcheck
