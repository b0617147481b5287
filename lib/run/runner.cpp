// Case execution as a pipeline of small steps: the plan (run/case_plan.h: skip checks, tensors,
// layouts), the inputs and each layout through the impl (run/layout_exec.h), then the three checks
// (run/case_checks.h), from whose typed results the CaseResult is assembled.
#include "run/runner.h"

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <stdexcept>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/phase_profile.h"
#include "run/case_checks.h"
#include "run/case_plan.h"
#include "run/device_memory.h"
#include "run/host_held_output.h"
#include "run/layout_exec.h"

namespace bitcheck {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t max_cached_reference_bytes = std::size_t(1) << 30;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// BITCHECK_OUTPUTS_ON_HOST=1: every output comes to the host and is compared there, as before
// impls could leave them on the device. The results are the same; two runs, one with it, show
// that (bitcheck diff) and what the device comparisons save.
bool outputs_on_host() {
  const char* value = std::getenv("BITCHECK_OUTPUTS_ON_HOST");
  return value && std::string(value) == "1";
}

// The FP32 reference of the last input group (CaseSpec::input_group): the impls of a group run
// one after another (the sweep orders them so) and share it. Kept only up to a size.
struct ReferenceCache {
  std::string group;
  std::map<std::string, Tensor> outputs;
  void clear() {
    group.clear();
    outputs.clear();
  }
};

std::string fingerprint_outputs(const std::vector<TensorDecl>& decls,
                                const LayoutOutputs& canonical, const LayoutOutputs* reductions,
                                const std::vector<std::int64_t>& rows) {
  std::uint64_t hash = 0;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_output) {
      hash = fingerprint_bytes(decl.name.data(), decl.name.size(), hash);
      hash = fingerprint_rows(canonical.rows.at(decl.name), rows, hash);
    } else if (decl.role == TensorRole::reduction_output && reductions) {
      const Tensor& tensor = reductions->reductions.at(decl.name);
      hash = fingerprint_bytes(decl.name.data(), decl.name.size(), hash);
      hash = fingerprint_bytes(tensor.data(), tensor.bytes(), hash);
    }
  }
  return fingerprint_hex(hash);
}

}  // namespace

struct Runner::State {
  const Registry& registry;
  const Contract& contract;
  ParameterCache parameters;
  ReferenceCache reference;

  State(const Registry& r, const Contract& c) : registry(r), contract(c) {}
};

namespace {

// One case through the pipeline. Each step leaves its typed result in a member, so a case that
// fails part-way (`error`) still reports the layouts that ran and what they found.
class CasePipeline {
 public:
  // A follower is a rank other than 0 of a case whose ranks are processes: it runs the layouts at
  // the case's tp with the others (their collectives need it) and leaves the checks to rank 0.
  CasePipeline(const CaseSpec& spec, const OpDef& op, Impl& impl, const Contract& contract,
               ParameterCache& parameters, ReferenceCache& reference, CaseArtifacts* artifacts,
               bool follower, KernelRecorder* recorder,
               std::optional<std::string> capture_skip_reason, bool outputs_stay_on_device,
               bool simulate_device, const DeviceInputSource* input_device)
      : follower_(follower),
        outputs_stay_on_device_(outputs_stay_on_device),
        simulate_device_(simulate_device),
        input_device_(input_device),
        recorder_(recorder),
        capture_skip_reason_(std::move(capture_skip_reason)),
        spec_(spec),
        op_(op),
        impl_(impl),
        contract_(contract),
        parameters_(parameters),
        reference_(reference),
        artifacts_(artifacts) {}

  void run() {
    plan_ = plan_case(op_, spec_);
    canonical_.rows_layout = plan_.canonical_rows_layout;
    auto inputs_start = Clock::now();
    inputs_ = generate_inputs(plan_, spec_, parameters_, input_device_);
    timings_.inputs_seconds = seconds_since(inputs_start);
    timings_.profile.add(Phase::inputs, timings_.inputs_seconds, tensor_bytes(inputs_.tensors));
    run_layouts();
    if (follower_) return;
    start_fingerprint();
    compute_reference();
    check_accuracy();
    keep_artifacts();
    if (reference_bytes() > max_cached_reference_bytes) reference_.clear();
  }

  // The CaseResult from the checks' results (partial ones after an error).
  void assemble(CaseResult& result) {
    if (complete_) result.verdict = verdict_of(invariance_, determinism_, accuracy_);
    timings_.profile.add(Phase::references, timings_.reference_seconds, reference_computed_bytes_);
    // The comparisons made where the impl left its outputs, and the bytes of those outputs that
    // came to the host after all (canonical layouts, drifts), apart from the host's.
    DeviceWork checks = invariance_.device;  // inside the checks' compare_seconds
    checks.append(determinism_.device);
    DeviceWork device = device_fetches_;
    device.append(checks);
    timings_.profile.add(Phase::device_comparisons, device.compare_seconds, device.compared_bytes);
    timings_.profile.add(Phase::downloads, device.fetch_seconds, device.fetched_bytes);
    timings_.profile.add(
        Phase::comparisons,
        std::max(0.0, timings_.compare_seconds - checks.compare_seconds - checks.fetch_seconds),
        compared_bytes() - device.settled_bytes);
    result.layouts_run = std::move(layouts_run_);
    result.skipped_layouts = std::move(skipped_layouts_);
    result.drift = std::move(invariance_.drift);
    result.cross_tp_drift = std::move(cross_tp_drift_);
    result.layout_comparisons = invariance_.comparisons;
    result.nondeterminism = std::move(determinism_.nondeterminism);
    result.accuracy = std::move(accuracy_.tensors);
    result.fingerprint = std::move(fingerprint_);
    result.impl_config = std::move(impl_config_);
    for (auto& [layout, records] : records_) {
      if (!records.kernels.empty()) result.kernels[layout] = std::move(records.kernels);
      if (records.paths.empty()) continue;  // the layout's first call failed (an error case)
      records.paths.insert(records.kernel_paths.begin(), records.kernel_paths.end());
      result.paths[layout] = std::vector<std::string>(records.paths.begin(), records.paths.end());
    }
    result.timings = timings_;
  }

 private:
  // Every layout through the impl, canonical ones first. Each other layout is checked for
  // invariance as soon as it has run, the batch layout too (against alone); each canonical
  // layout's repeats for determinism against its first run.
  void run_layouts() {
    for (const auto& name : plan_.layouts) {
      std::optional<Layout> layout = build_layout(op_, impl_, spec_, plan_, name);
      if (!layout) continue;
      if (layout->captured && capture_skip_reason_) {
        skipped_layouts_[name] = *capture_skip_reason_;
        continue;
      }
      const bool at_tp1 = plan_.rank(name) == -1;
      if (at_tp1 && follower_) continue;  // rank 0 runs the tp = 1 layouts on its own
      try {
        run_layout(name, *layout, at_tp1);
      } catch (const CaptureUnsupported& unsupported) {
        records_.erase(name);
        skipped_layouts_[name] = unsupported.what();
        continue;
      }
      layouts_run_.push_back(name);
    }
  }

  // One layout through the impl (a canonical one spec.repeats times), checked or kept.
  void run_layout(const std::string& name, const Layout& layout, bool at_tp1) {
    const int tp = at_tp1 ? 1 : spec_.tp;
    const int runs = plan_.canonical(name) ? spec_.repeats : 1;
    for (int repeat = 0; repeat < runs; ++repeat) {
      // Reductions are compared in the batch layout (the reference) and in layouts holding
      // every token in order; kept for a dump too.
      const bool reductions_wanted = name == canonical_reduction_layout ||
                                     layout.covers_all_rows_in_order || artifacts_ != nullptr;
      // The checks read the values of the canonical layouts' rows and the batch layout's
      // reductions (accuracy, fingerprint, a differing row's other side), of the layouts at
      // tp = 1 that a case at tp > 1 is compared with, and a dump every layout's: those come to
      // the host (the canonical ones stay on the device too, for the comparisons there). The
      // others' are compared where the impl left them, and come over only where they differ.
      const bool all_on_host = at_tp1 || artifacts_ != nullptr;
      const bool first_canonical = repeat == 0 && plan_.rank(name) != 2;
      LayoutRecords& records = records_[name];
      LayoutOutputs outputs = execute_layout(layout, impl_, spec_, plan_, inputs_, impl_config_,
                                             timings_, reductions_wanted, outputs_stay_on_device_,
                                             outputs_stay_on_device_ && simulate_device_,
                                             plan_.rank(name) == 0, recorder_, records, tp);
      bring_all_to_host(outputs, plan_.decls, device_fetches_, all_on_host || first_canonical,
                        all_on_host || (repeat == 0 && name == canonical_reduction_layout));
      // A layout with nothing for the checks to read (an op whose pass outputs only token
      // reductions, in a layout that does not hold every token in order) may run nothing at all:
      // no path.
      const bool checked = plan_.has_rows || reductions_wanted;
      if (records.paths.empty() && checked) records.paths.insert(unrecorded_path_);
      if (at_tp1) {
        tp1_kept_.emplace(parse_tp_layout_name(name).first, std::move(outputs));
      } else if (repeat == 0) {
        check_across_tp(name, outputs);
        keep_or_check(name, layout, std::move(outputs));
      } else {
        auto compare_start = Clock::now();
        determinism_.append(check_determinism(plan_.decls, name, repeat, kept_.at(name), outputs));
        timings_.compare_seconds += seconds_since(compare_start);
      }
    }
    // Once its repeats are checked, nothing reads a canonical layout's reductions but the batch
    // layout's: dropped, so a case holds at most two sets of them (a vocabulary-sized dtable is
    // gigabytes, on the host or on the device).
    auto kept = kept_.find(name);
    if (!artifacts_ && name != canonical_reduction_layout && kept != kept_.end()) {
      kept->second.reductions.clear();
      for (const auto& decl : plan_.decls)
        if (decl.role == TensorRole::reduction_output) kept->second.on_device.erase(decl.name);
    }
  }

  // A canonical layout at tp > 1 against the same layout at tp = 1. Where the impl claims the
  // same bits at every tp (or is a control built to differ) a difference is drift; otherwise it is
  // reported beside the verdict.
  void check_across_tp(const std::string& name, LayoutOutputs& outputs) {
    auto reference = tp1_kept_.find(name);
    if (reference == tp1_kept_.end()) return;
    auto compare_start = Clock::now();
    InvarianceResult across = bitcheck::check_across_tp(plan_.decls, name, tp_layout_name(name, 1),
                                                        outputs, reference->second);
    timings_.compare_seconds += seconds_since(compare_start);
    if (impl_.tensor_parallelism().across_tp == TensorParallelism::AcrossTp::observed) {
      for (auto& metrics : across.drift) cross_tp_drift_.push_back(std::move(metrics));
      return;
    }
    invariance_.append(std::move(across));
  }

  void keep_or_check(const std::string& name, const Layout& layout, LayoutOutputs outputs) {
    const int rank = plan_.rank(name);
    if (rank == 2) {
      check_layout(name, layout, outputs);
      if (artifacts_) kept_.emplace(name, std::move(outputs));
      return;
    }
    LayoutOutputs& kept = kept_.emplace(name, std::move(outputs)).first->second;
    if (rank == 0) canonical_.alone = &kept;
    if (rank == 1) {
      canonical_.batch = &kept;
      if (canonical_.alone) check_layout(name, layout, kept);  // the batch against alone too
    }
  }

  void check_layout(const std::string& name, const Layout& layout, LayoutOutputs& outputs) {
    auto compare_start = Clock::now();
    invariance_.append(
        check_invariance(plan_.decls, name, layout.covers_all_rows_in_order, outputs, canonical_));
    timings_.compare_seconds += seconds_since(compare_start);
  }

  // The FP32 reference on the same rounded inputs: along the impl's own trajectory for composed
  // ops (for this case alone), else once per input group.
  void compute_reference() {
    auto reference_start = Clock::now();
    request_ = reference_request(plan_, spec_);
    logical_inputs_ = take_logical_inputs(inputs_);
    const std::string group = spec_.input_group();
    const bool computed = op_.reference_along || reference_.group != group;
    if (op_.reference_along) {
      if (!canonical_.batch) throw std::logic_error(op_.name + ": the batch layout did not run");
      reference_.clear();
      op_.reference_along(spec_, logical_inputs_, canonical_.batch->rows, request_,
                          reference_.outputs);
    } else if (reference_.group != group) {
      reference_.clear();
      std::map<std::string, Tensor> fresh;
      op_.reference(spec_, logical_inputs_, request_, fresh);
      reference_.outputs = std::move(fresh);
      reference_.group = group;
    }
    if (computed) reference_computed_bytes_ = reference_bytes();
    timings_.reference_seconds = seconds_since(reference_start);
  }

  // The fingerprint of the canonical bits.
  std::string fingerprint() const {
    return fingerprint_outputs(plan_.decls,
                               canonical_.alone ? *canonical_.alone : *canonical_.batch,
                               canonical_.batch, plan_.alone_rows);
  }

  // The fingerprint (FNV-1a: one byte after another) of gigabytes of reductions takes seconds of
  // one thread: from 64 MB of reductions it is computed on a thread of its own while the
  // references are computed and the accuracy checked (it reads only the canonical outputs, which
  // nothing changes until the case ends).
  void start_fingerprint() {
    std::size_t reduction_bytes = 0;
    if (canonical_.batch) {
      for (const auto& [name, tensor] : canonical_.batch->reductions)
        reduction_bytes += tensor.bytes();
    }
    if (reduction_bytes >= (std::size_t(64) << 20))
      fingerprinted_ = std::async(std::launch::async, [this] { return fingerprint(); });
  }

  // Accuracy of the canonical outputs (along a trajectory: the batch layout's, which the
  // references were fed), then the fingerprint of the canonical bits.
  void check_accuracy() {
    auto compare_start = Clock::now();
    AccuracyInputs inputs;
    inputs.row_outputs = op_.reference_along ? canonical_.batch : canonical_.alone;
    inputs.batch = canonical_.batch;
    inputs.reference = &reference_.outputs;
    inputs.request = &request_;
    inputs.threshold_of = [this](const std::string& output) -> const Threshold& {
      const auto [key, tensor] =
          op_.threshold_of ? op_.threshold_of(output) : std::make_pair(op_.tolerance_key, output);
      return contract_.threshold_at_tp(key, spec_.tp, spec_.dtype_name, tensor);
    };
    inputs.nonfinite_rules.nan_matches_reference =
        spec_.special_values > 0 && contract_.special_values.nan == "match_reference_position";
    for (const auto& decl : plan_.decls) {  // one at a time: an error keeps the ones before it
      if (is_output(decl))
        accuracy_.tensors.push_back(check_output_accuracy(op_.name, decl, inputs));
    }
    fingerprint_ = fingerprinted_.valid() ? fingerprinted_.get() : fingerprint();
    timings_.compare_seconds += seconds_since(compare_start);
    complete_ = true;
  }

  void keep_artifacts() {
    if (!artifacts_) return;
    artifacts_->inputs = std::move(logical_inputs_);
    for (auto& [name, layout_outputs] : kept_) {
      auto& outputs = artifacts_->layout_outputs[name];
      for (auto& [tensor_name, tensor] : layout_outputs.rows) {
        outputs.emplace(tensor_name, std::move(tensor));
      }
      for (auto& [tensor_name, tensor] : layout_outputs.reductions) {
        outputs.emplace(tensor_name, std::move(tensor));
      }
    }
    artifacts_->reference = reference_.outputs;
    artifacts_->reference_rows = plan_.alone_rows;
  }

  // The bytes the checks read: both sides of every bitwise comparison, and each accuracy-checked
  // element with its fp32 reference.
  std::uint64_t compared_bytes() const {
    std::uint64_t bytes = invariance_.compared_bytes + determinism_.compared_bytes;
    std::size_t output = 0;
    for (const auto& decl : plan_.decls) {
      if (!is_output(decl) || output >= accuracy_.tensors.size()) continue;
      bytes += static_cast<std::uint64_t>(accuracy_.tensors[output++].compared) *
               (dtype_size(decl.dtype) + sizeof(float));
    }
    return bytes;
  }

  std::size_t reference_bytes() const {
    std::size_t bytes = 0;
    for (const auto& entry : reference_.outputs) bytes += entry.second.bytes();
    return bytes;
  }

  bool follower_;
  // The impl may leave its outputs on its device (outputs_may_stay_on_device).
  bool outputs_stay_on_device_;
  // An impl without a device whose outputs are held as if on one (run/host_held_output.h).
  bool simulate_device_ = false;
  // Where the impl's row inputs are generated on its device too (Inputs::device), or nullptr.
  const DeviceInputSource* input_device_;
  KernelRecorder* recorder_;  // the impl's backend's, while it records; else nullptr
  // Why the impl cannot run a captured layout (the graph layout); nullopt when it can.
  std::optional<std::string> capture_skip_reason_;
  const CaseSpec& spec_;
  const OpDef& op_;
  Impl& impl_;
  const Contract& contract_;
  ParameterCache& parameters_;
  ReferenceCache& reference_;
  CaseArtifacts* artifacts_;

  CasePlan plan_;
  Inputs inputs_;
  std::map<std::string, LayoutOutputs> kept_;      // canonical layouts (and every one for a dump)
  std::map<std::string, LayoutOutputs> tp1_kept_;  // a case at tp > 1: its canonicals at tp = 1
  CanonicalOutputs canonical_;
  ReferenceRequest request_;
  std::map<std::string, Tensor> logical_inputs_;

  std::vector<std::string> layouts_run_;
  std::map<std::string, std::string> skipped_layouts_;
  InvarianceResult invariance_;
  std::vector<DriftMetrics> cross_tp_drift_;
  DeterminismResult determinism_;
  DeviceWork device_fetches_;  // device-held outputs the canonical layouts brought to the host
  AccuracyResult accuracy_;
  std::string fingerprint_;
  nlohmann::json impl_config_;
  std::map<std::string, LayoutRecords> records_;  // by layout: every call's paths and kernels
  // What a layout whose calls recorded nothing ran: the single path of an impl that declares one,
  // else a name no declaration matches (the coverage table shows it as undeclared).
  std::string unrecorded_path_ = [this] {
    const std::vector<PathDecl> declared = impl_.paths();
    return declared.size() == 1 && !declared[0].family ? declared[0].name
                                                       : std::string(unrecorded_path_name);
  }();
  CaseTimings timings_;
  std::uint64_t reference_computed_bytes_ = 0;  // 0 when the group's cached reference served
  bool complete_ = false;
  // Last: destroyed (its thread joined) before the outputs it reads.
  std::future<std::string> fingerprinted_;
};

}  // namespace

Runner::Runner(const Registry& registry, const Contract& contract)
    : state_(std::make_unique<State>(registry, contract)) {}
Runner::~Runner() = default;

CaseResult Runner::run_case(const CaseSpec& spec, CaseArtifacts* artifacts) {
  auto case_start = Clock::now();
  CaseResult result;
  result.spec = spec;
  const OpDef* op = state_->registry.find_op(spec.op);
  Impl* impl = op ? state_->registry.find_impl(spec.op, spec.impl) : nullptr;
  if (!impl) throw std::logic_error("case names an unregistered op or impl: " + spec.id());
  result.backend = impl->backend();
  result.is_control = !impl->claims_invariance();
  result.expected_to_drift = case_expected_to_drift(*impl, spec);
  result.is_observation = impl->is_library_default();
  // A case at tp > 1 on a backend whose ranks are processes: ranks [0, tp) run it together.
  DeviceBackend* device = state_->registry.device_backend(impl->backend());
  const RankGroup group = device ? device->rank_group() : RankGroup{};
  const bool with_ranks = spec.tp > 1 && group.size > 1;
  if (with_ranks && group.rank >= spec.tp) {
    result.verdict = Verdict::skipped;
    result.reason = "rank " + std::to_string(group.rank) + " is not one of the case's " +
                    std::to_string(spec.tp) + " ranks";
    return result;
  }
  std::optional<std::string> reason =
      case_skip_reason(state_->registry, state_->contract, *op, *impl, spec);
  // A case with more ranks than the group skips on every rank alike (tp_skip_reason) and asks no
  // one: ranks the group does not have would never answer.
  if (with_ranks && spec.tp <= group.size && !device->all_ranks_agree(spec.tp, !reason) && !reason)
    reason = "another rank of the case skips it";
  if (reason) {
    result.verdict = Verdict::skipped;
    result.reason = *reason;
    return result;
  }
  if (result.expected_to_drift) result.drift_needs_rows = rows_to_reach_a_switch(*impl, spec);
  KernelRecorder* recorder = state_->registry.kernel_recorder(impl->backend());
  if (recorder && !recorder->recording()) recorder = nullptr;
  const bool host_peak_reset = reset_peak_host_memory();
  const bool stay_on_device =
      !outputs_on_host() && outputs_may_stay_on_device(state_->registry, *op, *impl, spec);
  // An impl that reads its row inputs on the device gets them generated there (and placed in each
  // invocation's slots there), not uploaded: the host still generates them for the reference.
  // Not where shards share the GPU: a placement in every invocation's slots waits for it each time.
  const DeviceInputSource* input_device =
      stay_on_device && impl->info().row_inputs_on_device && !device_shared_by_shards()
          ? dynamic_cast<const DeviceInputSource*>(device)
          : nullptr;
  CasePipeline pipeline(spec, *op, *impl, state_->contract, state_->parameters, state_->reference,
                        artifacts, with_ranks && group.rank > 0, recorder,
                        capture_skip_reason(state_->registry, *impl), stay_on_device,
                        device == nullptr && simulate_device_outputs(), input_device);
  std::optional<std::string> error;
  try {
    pipeline.run();
  } catch (const std::exception& exception) {
    error = exception.what();
  }
  pipeline.assemble(result);
  if (error) {
    result.verdict = Verdict::error;
    result.reason = *error;
  }
  result.timings.total_seconds = seconds_since(case_start);
  if (host_peak_reset) result.timings.host_peak_bytes = peak_host_memory_bytes().value_or(0);
  return result;
}

}  // namespace bitcheck
