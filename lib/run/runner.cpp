// Case execution as a pipeline of small steps: the plan (skip checks, tensors, layouts), the inputs
// from the counter-based generator, each layout through the impl, then the three checks
// (case_checks.h), from whose typed results the CaseResult is assembled.
#include "run/runner.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/phase_profile.h"
#include "core/rng.h"
#include "run/case_checks.h"
#include "run/device_memory.h"
#include "run/device_slots.h"
#include "run/input_generator.h"
#include "run/layout.h"

namespace bitcheck {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t max_reference_reduction_rows = 256;
// Row outputs wider than this get their accuracy checked on this many sampled columns.
constexpr std::size_t max_reference_columns = 1024;
constexpr std::size_t max_cached_reference_bytes = std::size_t(1) << 30;
constexpr std::size_t parameter_cache_entries = 6;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::int64_t> full_shape(const TensorDecl& decl, std::int64_t rows) {
  std::vector<std::int64_t> shape = {rows};
  shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
  return shape;
}

std::string group_scales_string(const std::vector<float>& scales) {
  std::string text;
  for (float scale : scales) text += std::to_string(scale) + ",";
  return text;
}

bool is_output(const TensorDecl& decl) {
  return decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
}

// Parameters (weights, gains) shared by the cases that draw the same ones: the last few, with
// the ids device impls cache their uploads by. Input ids are unique in the process (not per
// Runner).
class ParameterCache {
 public:
  // `special_value_rate`: the case's, for a parameter that takes special values; else 0.
  std::pair<std::shared_ptr<const Tensor>, std::uint64_t> get(const TensorDecl& decl,
                                                              std::uint64_t seed,
                                                              double special_value_rate) {
    std::string key =
        decl.name + "/" + to_string(decl.dtype) + "/" + shape_string(decl.shape) + "/" +
        std::to_string(seed) + "/" + std::to_string(decl.scale) + "/" +
        group_scales_string(decl.group_scales) + "/" + std::to_string(decl.index_bound) + "/" +
        std::to_string(static_cast<int>(decl.generator)) + "/" + std::to_string(special_value_rate);
    for (const auto& entry : entries_) {
      if (entry.first == key) return entry.second;
    }
    auto tensor =
        std::make_shared<const Tensor>(generate_input(decl, decl.shape, seed, special_value_rate));
    if (entries_.size() >= parameter_cache_entries) entries_.erase(entries_.begin());
    entries_.push_back({key, {tensor, new_input_id()}});
    return entries_.back().second;
  }

 private:
  std::vector<std::pair<std::string, std::pair<std::shared_ptr<const Tensor>, std::uint64_t>>>
      entries_;
};

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

struct Inputs {
  std::map<std::string, std::shared_ptr<const Tensor>> tensors;  // logical rows for row inputs
  std::map<std::string, std::uint64_t> ids;
};

// What a case will do, before anything runs: its tensors, logical rows, the rows computed alone
// and the layouts in run order (the canonical ones first, so every other layout is compared as
// soon as it has run and its outputs, gigabytes for GPU-sized cases, are dropped right away).
struct CasePlan {
  std::vector<TensorDecl> decls;
  bool has_rows = false, has_reductions = false;
  std::int64_t rows = 0;
  std::vector<std::int64_t> alone_rows;
  std::string canonical_rows_layout;
  std::vector<std::string> layouts;

  // -1: a layout at tp = 1 that a case at tp > 1 is compared against ("alone/tp=1"; run first,
  // once), 0: the canonical layout for row outputs, 1: the batch layout, 2: any
  // other.
  int rank(const std::string& layout) const {
    if (parse_tp_layout_name(layout).second == 1) return -1;
    if (layout == canonical_rows_layout && has_rows) return 0;
    if (layout == canonical_reduction_layout) return 1;
    return 2;
  }
  // A canonical layout runs spec.repeats times, for the determinism check.
  bool canonical(const std::string& layout) const {
    return (layout == canonical_rows_layout && has_rows) ||
           (layout == canonical_reduction_layout && has_reductions);
  }
};

// A case at tp > 1: an impl that runs on one rank, a shape it cannot split, or a device backend
// whose process group has fewer ranks (the CPU backend simulates its ranks in one process).
std::optional<std::string> tp_skip_reason(const Registry& registry, const Impl& impl,
                                          const CaseSpec& spec) {
  if (spec.tp == 1) return std::nullopt;
  const TensorParallelism parallelism = impl.tensor_parallelism();
  if (!parallelism.supports(spec.tp)) {
    return "impl " + impl.name() + " runs on at most " + std::to_string(parallelism.max_tp) +
           " rank(s), not tp=" + std::to_string(spec.tp);
  }
  if (auto problem = parallelism.split_problem(spec.dims, spec.tp))
    return "shape invalid: " + *problem;
  const DeviceBackend* device = registry.device_backend(impl.backend());
  if (!device) return std::nullopt;  // the CPU backend simulates its ranks
  if (auto unavailable = device->ranks_unavailable())
    return "tp=" + std::to_string(spec.tp) + ": " + *unavailable;
  if (device->rank_group().size < spec.tp) {
    return "tp=" + std::to_string(spec.tp) + " needs " + std::to_string(spec.tp) +
           " ranks, one process per GPU (sweep --devices listing " + std::to_string(spec.tp) +
           " GPUs); this run has " + std::to_string(device->rank_group().size);
  }
  return std::nullopt;
}

std::optional<std::string> skip_reason(const Registry& registry, const Contract& contract,
                                       const OpDef& op, const Impl& impl, const CaseSpec& spec) {
  if (auto reason = contract.dtype_skip_reason(spec.dtype_name)) return reason;
  if (!registry.backend_available(impl.backend())) {
    return "backend unavailable: " + registry.backend_reason(impl.backend());
  }
  if (spec.pass == Pass::backward && !op.has_backward) {
    return "op " + op.name + " has no backward pass";
  }
  if (!impl.supports(spec.pass)) {
    return "impl " + impl.name() + " has no " + to_string(spec.pass) + " pass";
  }
  if (op.shape_problem) {
    if (auto problem = op.shape_problem(spec)) return "shape invalid: " + *problem;
  }
  if (auto reason = tp_skip_reason(registry, impl, spec)) return reason;
  if (auto reason = impl.skip_reason(spec)) return reason;
  // Last, once the case is known to be valid: a device case too large for the free memory.
  return device_memory_skip_reason(registry, op, impl, spec);
}

// The batch at which a control's first switch point lies, when the case's batch stays below it
// (its canonical layout runs one row, the others at most spec.rows: every layout takes the same
// path), else 0. Searched as far as a sweep's default switch_max_batch.
std::int64_t rows_to_reach_a_switch(const Impl& impl, const CaseSpec& spec) {
  constexpr std::int64_t search_rows = 4096;
  std::int64_t first = 0;
  for (const SwitchPoint& point : impl.switch_points(spec, search_rows))
    if (first == 0 || point.rows < first) first = point.rows;
  return first > spec.rows ? first : 0;
}

CasePlan plan_case(const OpDef& op, const CaseSpec& spec) {
  CasePlan plan;
  plan.decls = op.tensors(spec);
  for (const auto& decl : plan.decls) {
    plan.has_rows = plan.has_rows || decl.role == TensorRole::row_output;
    plan.has_reductions = plan.has_reductions || decl.role == TensorRole::reduction_output;
  }
  plan.rows = op.logical_rows ? op.logical_rows(spec) : spec.rows;
  plan.alone_rows = select_alone_rows(spec, plan.rows);
  plan.canonical_rows_layout = op.make_layout ? op.canonical_layout : canonical_layout;
  plan.layouts = spec.layouts;
  auto ensure = [&](const std::string& name) {
    if (std::find(plan.layouts.begin(), plan.layouts.end(), name) == plan.layouts.end()) {
      plan.layouts.insert(plan.layouts.begin(), name);
    }
  };
  // The batch layout is the reference for token reductions and for rows outside the alone
  // sample, so it runs whenever either exists. It also holds the trajectory a composed op's
  // per-call references follow.
  if (plan.has_reductions || op.reference_along ||
      (plan.has_rows && static_cast<std::int64_t>(plan.alone_rows.size()) < plan.rows)) {
    ensure(canonical_reduction_layout);
  }
  if (plan.has_rows) ensure(plan.canonical_rows_layout);
  // At tp > 1 the canonical layouts also run at tp = 1: the rows alone at tp = 1 stay the
  // reference, so a token is compared across TP sizes as well as across batches.
  if (spec.tp > 1 && !op.tp_in_math) {
    for (const std::string& name :
         {plan.canonical_rows_layout, std::string(canonical_reduction_layout)}) {
      if (std::find(plan.layouts.begin(), plan.layouts.end(), name) == plan.layouts.end()) continue;
      plan.layouts.push_back(tp_layout_name(name, 1));
    }
  }
  std::stable_sort(
      plan.layouts.begin(), plan.layouts.end(),
      [&](const std::string& a, const std::string& b) { return plan.rank(a) < plan.rank(b); });
  return plan;
}

// Why the impl cannot run a captured layout, or nullopt: CUDA graphs need a device backend, and an
// impl whose run() cannot capture its launches says so (ImplInfo::graph_capturable).
std::optional<std::string> capture_skip_reason(const Registry& registry, const Impl& impl) {
  if (!registry.device_backend(impl.backend())) {
    return "the " + impl.backend() + " backend has no device, so no CUDA graph to capture into";
  }
  if (!impl.info().graph_capturable) {
    return impl.name() +
           " cannot be captured into a CUDA graph: its run() uploads, downloads or synchronizes "
           "between its launches";
  }
  return std::nullopt;
}

// nullopt: the layout does not apply to this op or case (an op's own layout names and the
// generic ones are disjoint), so it is not run.
std::optional<Layout> build_layout(const OpDef& op, const Impl& impl, const CaseSpec& spec,
                                   const CasePlan& plan, const std::string& tp_name) {
  const std::string name = parse_tp_layout_name(tp_name).first;
  if (op.make_layout) return op.make_layout(name, spec);
  if (!is_known_layout(name)) return std::nullopt;
  return make_layout(name, spec, plan.alone_rows, impl.token_granularity());
}

Inputs generate_inputs(const CasePlan& plan, const CaseSpec& spec, ParameterCache& parameters) {
  Inputs inputs;
  for (const auto& decl : plan.decls) {
    if (decl.role == TensorRole::parameter) {
      auto [tensor, id] =
          parameters.get(decl, spec.seed, decl.takes_special_values ? spec.special_values : 0);
      inputs.tensors[decl.name] = tensor;
      inputs.ids[decl.name] = id;
    } else if (decl.role == TensorRole::row_input) {
      inputs.tensors[decl.name] = std::make_shared<const Tensor>(generate_input(
          decl, full_shape(decl, plan.rows), spec.seed, spec.special_values, spec.ids));
      inputs.ids[decl.name] = new_input_id();
    }
  }
  return inputs;
}

bool is_identity(const Invocation& invocation, std::int64_t rows) {
  bool identity = invocation.slots() == rows;
  for (std::int64_t s = 0; identity && s < invocation.slots(); ++s) {
    identity = invocation.slot_rows[static_cast<std::size_t>(s)] == s;
  }
  return identity;
}

// One invocation's batch: parameters and in-order row inputs shared, other row inputs placed in
// their slots (pad slots NaN), row outputs poisoned, reduction outputs carried across invocations.
Batch make_batch(const CaseSpec& spec, const Layout& layout, std::size_t index,
                 const std::vector<TensorDecl>& decls, const Inputs& inputs, std::int64_t rows,
                 LayoutOutputs& result, bool reductions_wanted, int tp) {
  const Invocation& invocation = layout.invocations[index];
  Batch batch;
  batch.spec = &spec;
  batch.tp = tp;
  batch.invocation = &invocation;
  batch.invocation_index = static_cast<std::int64_t>(index);
  batch.invocation_count = static_cast<std::int64_t>(layout.invocations.size());
  batch.reductions_wanted = reductions_wanted;
  batch.captured = layout.captured;
  const bool identity = is_identity(invocation, rows);
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::parameter || (decl.role == TensorRole::row_input && identity)) {
      batch.inputs[decl.name] = inputs.tensors.at(decl.name);
      batch.input_ids[decl.name] = inputs.ids.at(decl.name);
    } else if (decl.role == TensorRole::row_input) {
      const Tensor& logical = *inputs.tensors.at(decl.name);
      // Pad slots: NaN, so a leak into real rows cannot hide.
      Tensor physical = Tensor::poisoned(decl.dtype, full_shape(decl, invocation.slots()));
      for (std::int64_t s = 0; s < invocation.slots(); ++s) {
        std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
        if (row >= 0) physical.copy_row_from(logical, row, s);
      }
      batch.inputs[decl.name] = std::make_shared<const Tensor>(std::move(physical));
      batch.input_ids[decl.name] = new_input_id();
    } else if (decl.role == TensorRole::row_output) {
      // Poison: an unwritten element shows up as NaN.
      batch.outputs.emplace(decl.name,
                            Tensor::poisoned(decl.dtype, full_shape(decl, invocation.slots())));
    } else {
      batch.outputs.emplace(decl.name, std::move(result.reductions[decl.name]));
    }
  }
  return batch;
}

// Takes an invocation's outputs into the layout's: row outputs by logical row (or whole, when the
// layout is one in-order invocation), reduction outputs as they are.
void gather_outputs(const Impl& impl, const Invocation& invocation, bool whole,
                    const std::vector<TensorDecl>& decls, std::int64_t rows, Batch& batch,
                    LayoutOutputs& result) {
  for (const auto& decl : decls) {
    if (!is_output(decl)) continue;
    Tensor& output = batch.out(decl.name);
    auto expected =
        decl.role == TensorRole::row_output ? full_shape(decl, invocation.slots()) : decl.shape;
    if (output.shape() != expected || output.dtype() != decl.dtype) {
      throw std::runtime_error("impl " + impl.name() + " returned " + decl.name + " as " +
                               to_string(output.dtype()) + shape_string(output.shape()) +
                               ", expected " + to_string(decl.dtype) + shape_string(expected));
    }
    if (decl.role == TensorRole::reduction_output) {
      result.reductions[decl.name] = std::move(output);
      continue;
    }
    if (whole) {
      result.rows[decl.name] = std::move(output);
      result.present.assign(static_cast<std::size_t>(rows), true);
      continue;
    }
    for (std::int64_t s = 0; s < invocation.slots(); ++s) {
      std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
      if (row < 0) continue;
      result.rows[decl.name].copy_row_from(output, s, row);
      result.present[static_cast<std::size_t>(row)] = true;
    }
  }
}

// What a layout's calls recorded: their launch paths and, with provenance, their kernels.
struct LayoutRecords {
  std::set<std::string> paths;
  // The kernel sequences of an impl with one declared path (Impl::records_kernel_sequences).
  std::set<std::string> kernel_paths;
  std::vector<KernelUse> kernels;
};

std::uint64_t tensor_bytes(const std::map<std::string, std::shared_ptr<const Tensor>>& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& entry : tensors) bytes += entry.second->bytes();
  return bytes;
}

std::uint64_t tensor_bytes(const std::map<std::string, Tensor>& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& entry : tensors) bytes += entry.second.bytes();
  return bytes;
}

// The bytes the runner copies to stage an invocation: its row inputs placed in slots (none when
// the invocation is the logical rows in order) and its row outputs gathered back by logical row.
std::uint64_t staged_bytes(const Batch& batch, const std::vector<TensorDecl>& decls,
                           bool identity) {
  std::uint64_t bytes = 0;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_input && !identity) bytes += batch.in(decl.name).bytes();
    if (decl.role == TensorRole::row_output && !identity) {
      const auto found = batch.outputs.find(decl.name);
      if (found != batch.outputs.end()) bytes += found->second.bytes();
    }
  }
  return bytes;
}

// One call of the impl inside the recordings of its paths and, when `recorder` is given, of its
// kernels (what the recorder holds before the call is dropped, what it holds after is the call's),
// its time split: the uploads, downloads and bookkeeping it recorded, and the rest as the impl call
// itself, which moves the bytes of the batch's tensors.
void run_recorded(Impl& impl, Batch& batch, KernelRecorder* recorder, CaseTimings& timings,
                  LayoutRecords& records) {
  PathRecording paths;
  KernelRecording kernels(recorder != nullptr);
  if (recorder) recorder->begin();
  PhaseProfile call;
  auto start = Clock::now();
  {
    // A rank of a group at tp > 1 never waits for a slot: its peers may hold the others while
    // they wait for it in a collective.
    std::optional<DeviceSlot> slot;
    if (batch.tp == 1) {
      slot.emplace();
      call.add(Phase::device_wait, seconds_since(start));
      start = Clock::now();
    }
    PhaseRecording phases(call);
    impl.run(batch);
  }
  const double seconds = seconds_since(start);
  timings.impl_seconds += seconds;
  const double recorded = call[Phase::uploads].seconds + call[Phase::downloads].seconds +
                          call[Phase::bookkeeping].seconds;
  call.add(Phase::impl_calls, std::max(0.0, seconds - recorded),
           tensor_bytes(batch.inputs) + tensor_bytes(batch.outputs));
  timings.profile += call;
  if (recorder)
    for (KernelLaunch& launch : recorder->take()) kernels.add(std::move(launch));
  records.paths.insert(paths.paths().begin(), paths.paths().end());
  tally_kernels(kernels.launches(), records.kernels);
  if (!impl.records_kernel_sequences()) return;
  const std::string sequence = kernel_sequence_path(kernels.launches());
  if (!sequence.empty()) records.kernel_paths.insert(sequence);
}

// Runs every invocation of a layout through the impl; the outputs by logical row.
LayoutOutputs execute_layout(const Layout& layout, Impl& impl, const CaseSpec& spec,
                             const CasePlan& plan, const Inputs& inputs,
                             nlohmann::json& impl_config, CaseTimings& timings,
                             bool reductions_wanted, KernelRecorder* recorder,
                             LayoutRecords& records, int tp) {
  LayoutOutputs result;
  result.present.assign(static_cast<std::size_t>(plan.rows), false);
  std::shared_ptr<void> layout_state;  // the impl's state across this layout's invocations
  // One invocation holding every row in order (the batch layout): its outputs are the logical
  // outputs, taken over without a copy.
  const bool whole =
      layout.invocations.size() == 1 && is_identity(layout.invocations[0], plan.rows);
  for (const auto& decl : plan.decls) {
    if (decl.role == TensorRole::row_output && !whole) {
      result.rows.emplace(decl.name, Tensor::poisoned(decl.dtype, full_shape(decl, plan.rows)));
    } else if (decl.role == TensorRole::reduction_output) {
      result.reductions.emplace(decl.name, Tensor(decl.dtype, decl.shape));
    }
  }
  for (std::size_t i = 0; i < layout.invocations.size(); ++i) {
    const bool identity = is_identity(layout.invocations[i], plan.rows);
    auto staging_start = Clock::now();
    Batch batch =
        make_batch(spec, layout, i, plan.decls, inputs, plan.rows, result, reductions_wanted, tp);
    batch.layout_state = layout_state;
    double staging_seconds = seconds_since(staging_start);
    run_recorded(impl, batch, recorder, timings, records);
    layout_state = batch.layout_state;
    if (!batch.impl_config.is_null()) impl_config = batch.impl_config;
    staging_start = Clock::now();
    const std::uint64_t staged = staged_bytes(batch, plan.decls, identity);
    gather_outputs(impl, layout.invocations[i], whole, plan.decls, plan.rows, batch, result);
    staging_seconds += seconds_since(staging_start);
    timings.profile.add(Phase::staging, staging_seconds, staged);
  }
  return result;
}

// All of [0, rows) when small, else `limit` indices including the first and last.
std::vector<std::int64_t> reduction_sample(std::int64_t rows, std::uint64_t seed,
                                           std::size_t limit = max_reference_reduction_rows) {
  std::vector<std::int64_t> all;
  if (static_cast<std::size_t>(rows) <= limit) {
    for (std::int64_t r = 0; r < rows; ++r) all.push_back(r);
    return all;
  }
  std::set<std::int64_t> chosen = {0, rows - 1};
  LayoutRandom random(seed ^ hash_name("reduction_sample"));
  while (chosen.size() < limit) chosen.insert(random.uniform_int(0, rows - 1));
  return {chosen.begin(), chosen.end()};
}

// The rows (and, for wide outputs, columns) the reference computes.
ReferenceRequest reference_request(const CasePlan& plan, const CaseSpec& spec) {
  ReferenceRequest request{plan.alone_rows, {}, {}};
  for (const auto& decl : plan.decls) {
    if (decl.role == TensorRole::reduction_output && request.reduction_rows.empty()) {
      request.reduction_rows = reduction_sample(decl.shape.empty() ? 1 : decl.shape[0], spec.seed);
    }
    std::int64_t width = 1;
    for (std::int64_t extent : decl.shape) width *= extent;
    if (decl.role == TensorRole::row_output &&
        width > static_cast<std::int64_t>(max_reference_columns)) {
      request.columns[decl.name] =
          reduction_sample(width, spec.seed ^ hash_name(decl.name), max_reference_columns);
    }
  }
  return request;
}

// Row inputs are owned by this case alone once every layout has run: moved, not copied
// (gigabytes for vocab-sized backward cases). Cached parameters are shared, so copied.
std::map<std::string, Tensor> take_logical_inputs(Inputs& inputs) {
  std::map<std::string, Tensor> logical_inputs;
  for (auto& [name, tensor] : inputs.tensors) {
    if (tensor.use_count() == 1) {
      logical_inputs.emplace(name, std::move(*std::const_pointer_cast<Tensor>(tensor)));
      tensor.reset();
    } else {
      logical_inputs.emplace(name, *tensor);
    }
  }
  return logical_inputs;
}

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
               std::optional<std::string> capture_skip_reason)
      : follower_(follower),
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
    inputs_ = generate_inputs(plan_, spec_, parameters_);
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
    timings_.profile.add(Phase::comparisons, timings_.compare_seconds, compared_bytes());
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
      LayoutRecords& records = records_[name];
      LayoutOutputs outputs = execute_layout(layout, impl_, spec_, plan_, inputs_, impl_config_,
                                             timings_, reductions_wanted, recorder_, records, tp);
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
  }

  // A canonical layout at tp > 1 against the same layout at tp = 1. Where the impl claims the
  // same bits at every tp (or is a control built to differ) a difference is drift; otherwise it is
  // reported beside the verdict.
  void check_across_tp(const std::string& name, const LayoutOutputs& outputs) {
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
    const LayoutOutputs& kept = kept_.emplace(name, std::move(outputs)).first->second;
    if (rank == 0) canonical_.alone = &kept;
    if (rank == 1) {
      canonical_.batch = &kept;
      if (canonical_.alone) check_layout(name, layout, kept);  // the batch against alone too
    }
  }

  void check_layout(const std::string& name, const Layout& layout, const LayoutOutputs& outputs) {
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
      skip_reason(state_->registry, state_->contract, *op, *impl, spec);
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
  CasePipeline pipeline(spec, *op, *impl, state_->contract, state_->parameters, state_->reference,
                        artifacts, with_ranks && group.rank > 0, recorder,
                        capture_skip_reason(state_->registry, *impl));
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
