// Case ids, batch access and the registry of ops, impls and backends.
#include "core/op.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "core/special_values.h"

namespace bitcheck {

std::string to_string(Pass pass) {
  return pass == Pass::forward ? "forward" : "backward";
}

std::optional<Pass> parse_pass(const std::string& name) {
  if (name == "forward") return Pass::forward;
  if (name == "backward") return Pass::backward;
  return std::nullopt;
}

std::string to_string(TensorRole role) {
  switch (role) {
    case TensorRole::row_input:
      return "row_input";
    case TensorRole::parameter:
      return "parameter";
    case TensorRole::row_output:
      return "row_output";
    case TensorRole::reduction_output:
      return "reduction_output";
  }
  return "unknown";
}

std::string dims_string(const Dims& dims) {
  std::string text;
  for (const auto& [name, value] : dims) {
    if (!text.empty()) text += ",";
    text += name + "=" + std::to_string(value);
  }
  return text;
}

std::string CaseSpec::id() const {
  std::string text = op + "/" + impl + "/" + dtype_name + "/" + to_string(pass) + "/" +
                     dims_string(dims) + "/M=" + std::to_string(rows) +
                     "/seed=" + std::to_string(seed);
  if (tp > 1) text += "/tp=" + std::to_string(tp);
  if (ids != IdDistribution::uniform) text += "/ids=" + to_string(ids);
  if (special_values > 0) text += "/special=" + special_value_rate_string(special_values);
  if (!forced_path.empty()) text += "/path=" + forced_path;
  return text;
}

std::string CaseSpec::input_group() const {
  std::string text = op + "/" + dtype_name + "/" + to_string(pass) + "/" + dims_string(dims) +
                     "/M=" + std::to_string(rows) + "/seed=" + std::to_string(seed) +
                     "/alone=" + std::to_string(alone_rows);
  if (tp > 1) text += "/tp=" + std::to_string(tp);
  if (ids != IdDistribution::uniform) text += "/ids=" + to_string(ids);
  if (special_values > 0) text += "/special=" + special_value_rate_string(special_values);
  return text;
}

std::uint64_t new_input_id() {
  static std::atomic<std::uint64_t> counter{1};
  return counter++;
}

std::int64_t CaseSpec::dim(const std::string& name) const {
  auto it = dims.find(name);
  if (it == dims.end()) throw std::invalid_argument("case " + id() + " has no dim " + name);
  return it->second;
}

std::int64_t CaseSpec::optional_dim(const std::string& name) const {
  auto it = dims.find(name);
  return it == dims.end() ? 0 : it->second;
}

std::int64_t Invocation::valid_rows() const {
  return std::count_if(slot_rows.begin(), slot_rows.end(), [](std::int64_t r) { return r >= 0; });
}

const Tensor& Batch::in(const std::string& name) const {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw std::invalid_argument("batch has no input tensor '" + name + "'");
  return *it->second;
}

Tensor& Batch::out(const std::string& name) {
  auto it = outputs.find(name);
  if (it == outputs.end()) throw std::invalid_argument("batch has no output tensor '" + name + "'");
  return it->second;
}

namespace {

bool contains(const std::vector<Pass>& passes, Pass pass) {
  return std::find(passes.begin(), passes.end(), pass) != passes.end();
}

ImplInfo impl_info(std::string name, std::string backend, ImplKind kind, std::string description) {
  ImplInfo info;
  info.name = std::move(name);
  info.backend = std::move(backend);
  info.kind = kind;
  info.description = std::move(description);
  return info;
}

}  // namespace

ImplInfo ImplInfo::invariant(std::string name, std::string backend, std::string description) {
  return impl_info(std::move(name), std::move(backend), ImplKind::invariant,
                   std::move(description));
}

ImplInfo ImplInfo::control(std::string name, std::string backend, std::string description) {
  return impl_info(std::move(name), std::move(backend), ImplKind::control, std::move(description));
}

ImplInfo ImplInfo::library_default(std::string name, std::string backend, std::string description) {
  return impl_info(std::move(name), std::move(backend), ImplKind::library_default,
                   std::move(description));
}

ImplInfo& ImplInfo::only_passes(std::vector<Pass> supported) {
  passes = std::move(supported);
  return *this;
}

ImplInfo& ImplInfo::drifting_in(std::vector<Pass> drifting) {
  drifts_in = std::move(drifting);
  return *this;
}

ImplInfo& ImplInfo::with_dtypes(std::vector<std::string> supported) {
  dtypes = std::move(supported);
  return *this;
}

ImplInfo& ImplInfo::with_paths(std::vector<PathDecl> declared) {
  paths = std::move(declared);
  return *this;
}

ImplInfo& ImplInfo::capturable_in_graphs() {
  graph_capturable = true;
  return *this;
}

ImplInfo& ImplInfo::drifting_only_in_layout(std::string layout) {
  drifts_only_in_layout = std::move(layout);
  return *this;
}

ImplInfo& ImplInfo::on_ranks(TensorParallelism parallelism) {
  tensor_parallelism = std::move(parallelism);
  return *this;
}

ImplInfo& ImplInfo::timed_against(std::string impl) {
  bench_baseline = std::move(impl);
  return *this;
}

ImplInfo& ImplInfo::reading_row_inputs_on_device() {
  row_inputs_on_device = true;
  return *this;
}

Impl::Impl(ImplInfo info) : info_(std::move(info)) {
  if (info_.paths.empty())
    info_.paths = {PathDecl(single_path_name, "the impl's only launch path")};
}

bool Impl::records_kernel_sequences() const {
  return info_.paths.size() == 1 && !info_.paths[0].family;
}

bool Impl::supports(Pass pass) const {
  return contains(info_.passes, pass);
}

bool Impl::supports_dtype(const std::string& dtype_name) const {
  return info_.dtypes.empty() ||
         std::find(info_.dtypes.begin(), info_.dtypes.end(), dtype_name) != info_.dtypes.end();
}

bool Impl::expected_to_drift(Pass pass) const {
  return info_.kind == ImplKind::control && contains(info_.drifts_in, pass);
}

std::optional<std::string> Impl::dtype_skip_reason(const CaseSpec& spec,
                                                   const std::string& whose) const {
  if (supports_dtype(spec.dtype_name)) return std::nullopt;
  std::string listed;
  for (const auto& dtype : info_.dtypes) listed += (listed.empty() ? "" : ",") + dtype;
  return "dtype " + spec.dtype_name + " is not among the " + whose + " dtypes (" + listed + ")";
}

void Registry::add_op(OpDef op) {
  if (find_op(op.name)) throw std::logic_error("op registered twice: " + op.name);
  if (op.tolerance_key.empty()) op.tolerance_key = op.name;
  if (!op.reference == !op.reference_along)
    throw std::logic_error("op " + op.name + " needs exactly one of reference, reference_along");
  if (op.reference_along && !op.threshold_of)
    throw std::logic_error("op " + op.name + ": reference_along needs threshold_of");
  ops_.push_back(std::move(op));
}

void Registry::add_impl(const std::string& op, std::unique_ptr<Impl> impl) {
  if (!find_op(op)) throw std::logic_error("impl for unregistered op: " + op);
  if (find_impl(op, impl->name())) throw std::logic_error("impl registered twice: " + impl->name());
  impls_[op].push_back(std::move(impl));
}

void Registry::set_backend_status(const std::string& backend, bool available, std::string reason) {
  backends_[backend] = {available, std::move(reason)};
}

const OpDef* Registry::find_op(const std::string& name) const {
  for (const auto& op : ops_) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

Impl* Registry::find_impl(const std::string& op, const std::string& impl) const {
  auto it = impls_.find(op);
  if (it == impls_.end()) return nullptr;
  for (const auto& candidate : it->second) {
    if (candidate->name() == impl) return candidate.get();
  }
  return nullptr;
}

std::vector<const OpDef*> Registry::ops() const {
  std::vector<const OpDef*> result;
  for (const auto& op : ops_) result.push_back(&op);
  return result;
}

std::vector<Impl*> Registry::impls(const std::string& op) const {
  std::vector<Impl*> result;
  auto it = impls_.find(op);
  if (it == impls_.end()) return result;
  for (const auto& impl : it->second) result.push_back(impl.get());
  return result;
}

bool Registry::backend_available(const std::string& backend) const {
  auto it = backends_.find(backend);
  return it != backends_.end() && it->second.first;
}

std::string Registry::backend_reason(const std::string& backend) const {
  auto it = backends_.find(backend);
  return it == backends_.end() ? "backend '" + backend + "' is not built" : it->second.second;
}

std::vector<std::string> Registry::backends() const {
  std::vector<std::string> names;
  for (const auto& [name, status] : backends_) names.push_back(name);
  return names;
}

void Registry::set_device_backend(const std::string& backend,
                                  std::unique_ptr<DeviceBackend> device) {
  device_backends_[backend] = std::move(device);
}

DeviceBackend* Registry::device_backend(const std::string& backend) const {
  auto it = device_backends_.find(backend);
  return it == device_backends_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Registry::device_backend_names() const {
  std::vector<std::string> names;
  for (const auto& [name, device] : device_backends_) names.push_back(name);
  return names;
}

nlohmann::json device_backends_meta(const Registry& registry) {
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& name : registry.device_backend_names()) {
    meta[name] = registry.device_backend(name)->meta();
  }
  return meta;
}

void Registry::add_run_hook(RunHook hook) {
  run_hooks_.push_back(std::move(hook));
}

void Registry::set_kernel_recorder(const std::string& backend,
                                   std::unique_ptr<KernelRecorder> recorder) {
  kernel_recorders_[backend] = std::move(recorder);
}

KernelRecorder* Registry::kernel_recorder(const std::string& backend) const {
  auto found = kernel_recorders_.find(backend);
  return found == kernel_recorders_.end() ? nullptr : found->second.get();
}

std::vector<KernelRecorder*> Registry::kernel_recorders() const {
  std::vector<KernelRecorder*> recorders;
  for (const auto& entry : kernel_recorders_) recorders.push_back(entry.second.get());
  return recorders;
}

void DeviceBackend::join_ranks(const RankGroup&) {
  throw std::runtime_error("a group of ranks on a backend that runs on one rank only: " +
                           ranks_unavailable().value_or("(no reason given)"));
}

void start_run(const Registry& registry, const RunSettings& settings) {
  for (KernelRecorder* recorder : registry.kernel_recorders()) {
    if (settings.provenance)
      recorder->start();  // a source that is absent says why in its off_reason()
    else
      recorder->stop();
  }
  for (const RunHook& hook : registry.run_hooks()) hook.start(settings);
}

void finish_run(const Registry& registry) {
  for (const RunHook& hook : registry.run_hooks()) hook.finish();
}

}  // namespace bitcheck
