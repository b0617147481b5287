// The plan of a case (run/case_plan.h): whether it runs, its tensors and layouts in run order, and
// what its reference computes.
#include "run/case_plan.h"

#include <algorithm>
#include <set>

#include "core/backend.h"
#include "core/layout_names.h"
#include "core/rng.h"
#include "run/device_memory.h"

namespace bitcheck {
namespace {

constexpr std::size_t max_reference_reduction_rows = 256;
// Row outputs wider than this get their accuracy checked on this many sampled columns.
constexpr std::size_t max_reference_columns = 1024;

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

}  // namespace

std::optional<std::string> case_skip_reason(const Registry& registry, const Contract& contract,
                                            const OpDef& op, const Impl& impl,
                                            const CaseSpec& spec) {
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

std::optional<Layout> build_layout(const OpDef& op, const Impl& impl, const CaseSpec& spec,
                                   const CasePlan& plan, const std::string& tp_name) {
  const std::string name = parse_tp_layout_name(tp_name).first;
  if (op.make_layout) return op.make_layout(name, spec);
  if (!is_known_layout(name)) return std::nullopt;
  return make_layout(name, spec, plan.alone_rows, impl.token_granularity());
}

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

}  // namespace bitcheck
