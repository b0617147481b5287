// Case execution: inputs from the counter-based generator, every layout through the impl, then
// invariance (bits against the canonical layout), determinism (canonical repeats) and accuracy.
#include "bitcheck/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include "bitcheck/device_memory.h"
#include "bitcheck/layout.h"
#include "bitcheck/rng.h"
#include "bitcheck/special_values.h"

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

bool is_output(const TensorDecl& decl) {
  return decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
}

// Fills a tensor from the generator: element (row, column) depends only on the key, never on the
// layout. Rows are split over threads; the values do not depend on the split. With a special-value
// rate, that fraction of a float tensor's elements is NaN, +-Inf, subnormal or -0 instead.
Tensor generate(const TensorDecl& decl, std::vector<std::int64_t> shape, std::uint64_t seed,
                double special_value_rate = 0) {
  Tensor tensor(decl.dtype, std::move(shape));
  const std::uint64_t name_hash = hash_name(decl.name);
  const std::int64_t rows = tensor.rows(), width = tensor.row_size();
  auto fill_rows = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
      for (std::int64_t c = 0; c < width; ++c) {
        std::int64_t index = r * width + c;
        if (decl.generator == Generator::index) {
          auto bound = static_cast<std::uint64_t>(std::max<std::int64_t>(1, decl.index_bound));
          tensor.set_int(index, static_cast<std::int32_t>(counter_index(seed, name_hash, r, c, bound)));
        } else {
          tensor.set(index, counter_uniform(seed, name_hash, r, c) * decl.scale);
          SpecialElement special = special_value_at(decl.dtype, seed, name_hash, r, c, special_value_rate);
          if (special.kind != SpecialValue::none) tensor.set_bits(index, special.bits);
        }
      }
    }
  };
  std::int64_t threads = std::min<std::int64_t>(
      std::max(1u, std::thread::hardware_concurrency()), std::max<std::int64_t>(1, rows * width / (1 << 16)));
  if (threads <= 1) {
    fill_rows(0, rows);
    return tensor;
  }
  std::vector<std::thread> workers;
  std::int64_t per_thread = (rows + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    std::int64_t first = t * per_thread, last = std::min(rows, first + per_thread);
    if (first < last) workers.emplace_back(fill_rows, first, last);
  }
  for (auto& worker : workers) worker.join();
  return tensor;
}

struct LayoutResult {
  std::map<std::string, Tensor> rows;  // row outputs gathered by logical row
  std::vector<bool> present;           // which logical rows the layout produced
  std::map<std::string, Tensor> reductions;
};

struct Inputs {
  std::map<std::string, std::shared_ptr<const Tensor>> tensors;  // logical rows for row inputs
  std::map<std::string, std::uint64_t> ids;
};

}  // namespace

struct Runner::State {
  const Registry& registry;
  const Contract& contract;
  // Input ids are unique in the process (not per Runner): device impls cache uploads by id.
  static std::uint64_t next_input_id() { return new_input_id(); }
  std::vector<std::pair<std::string, std::pair<std::shared_ptr<const Tensor>, std::uint64_t>>> parameters;
  // The FP32 reference of the last input group (CaseSpec::input_group): the impls of a group run
  // one after another (the sweep orders them so) and share it. Kept only up to a size.
  std::string reference_group;
  std::map<std::string, Tensor> reference;

  State(const Registry& r, const Contract& c) : registry(r), contract(c) {}

  std::pair<std::shared_ptr<const Tensor>, std::uint64_t> parameter(const TensorDecl& decl,
                                                                     std::uint64_t seed) {
    std::string key = decl.name + "/" + to_string(decl.dtype) + "/" + shape_string(decl.shape) + "/" +
                      std::to_string(seed) + "/" + std::to_string(decl.scale) + "/" +
                      std::to_string(decl.index_bound) + "/" + std::to_string(static_cast<int>(decl.generator));
    for (const auto& entry : parameters) {
      if (entry.first == key) return entry.second;
    }
    auto tensor = std::make_shared<const Tensor>(generate(decl, decl.shape, seed));
    if (parameters.size() >= parameter_cache_entries) parameters.erase(parameters.begin());
    parameters.push_back({key, {tensor, next_input_id()}});
    return parameters.back().second;
  }

  LayoutResult execute(const Layout& layout, Impl& impl, const CaseSpec& spec, std::int64_t rows,
                       const std::vector<TensorDecl>& decls, const Inputs& inputs,
                       nlohmann::json& impl_config, double& impl_seconds, bool reductions_wanted) {
    LayoutResult result;
    result.present.assign(static_cast<std::size_t>(rows), false);
    std::shared_ptr<void> layout_state;  // the impl's state across this layout's invocations
    auto is_identity = [&](const Invocation& invocation) {
      bool identity = invocation.slots() == rows;
      for (std::int64_t s = 0; identity && s < invocation.slots(); ++s) {
        identity = invocation.slot_rows[static_cast<std::size_t>(s)] == s;
      }
      return identity;
    };
    // One invocation holding every row in order (the batch layout): its outputs are the logical
    // outputs, taken over without a copy.
    const bool whole = layout.invocations.size() == 1 && is_identity(layout.invocations[0]);
    for (const auto& decl : decls) {
      if (decl.role == TensorRole::row_output && !whole) {
        result.rows.emplace(decl.name, Tensor(decl.dtype, full_shape(decl, rows)));
        result.rows[decl.name].fill_nan();
      } else if (decl.role == TensorRole::reduction_output) {
        result.reductions.emplace(decl.name, Tensor(decl.dtype, decl.shape));
      }
    }
    for (std::size_t i = 0; i < layout.invocations.size(); ++i) {
      const Invocation& invocation = layout.invocations[i];
      Batch batch;
      batch.spec = &spec;
      batch.invocation = &invocation;
      batch.invocation_index = static_cast<std::int64_t>(i);
      batch.invocation_count = static_cast<std::int64_t>(layout.invocations.size());
      batch.reductions_wanted = reductions_wanted;
      batch.layout_state = layout_state;
      const bool identity = is_identity(invocation);
      for (const auto& decl : decls) {
        if (decl.role == TensorRole::parameter || (decl.role == TensorRole::row_input && identity)) {
          batch.inputs[decl.name] = inputs.tensors.at(decl.name);
          batch.input_ids[decl.name] = inputs.ids.at(decl.name);
        } else if (decl.role == TensorRole::row_input) {
          const Tensor& logical = *inputs.tensors.at(decl.name);
          Tensor physical(decl.dtype, full_shape(decl, invocation.slots()));
          physical.fill_nan();  // pad slots: NaN, so a leak into real rows cannot hide
          for (std::int64_t s = 0; s < invocation.slots(); ++s) {
            std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
            if (row >= 0) physical.copy_row_from(logical, row, s);
          }
          batch.inputs[decl.name] = std::make_shared<const Tensor>(std::move(physical));
          batch.input_ids[decl.name] = next_input_id();
        } else if (decl.role == TensorRole::row_output) {
          Tensor output(decl.dtype, full_shape(decl, invocation.slots()));
          output.fill_nan();  // poison: an unwritten element shows up as NaN
          batch.outputs.emplace(decl.name, std::move(output));
        } else {
          batch.outputs.emplace(decl.name, std::move(result.reductions[decl.name]));
        }
      }
      auto start = Clock::now();
      impl.run(batch);
      impl_seconds += seconds_since(start);
      layout_state = batch.layout_state;
      if (!batch.impl_config.is_null()) impl_config = batch.impl_config;
      for (const auto& decl : decls) {
        if (!is_output(decl)) continue;
        Tensor& output = batch.out(decl.name);
        auto expected = decl.role == TensorRole::row_output ? full_shape(decl, invocation.slots()) : decl.shape;
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
    return result;
  }
};

Runner::Runner(const Registry& registry, const Contract& contract)
    : state_(std::make_unique<State>(registry, contract)) {}
Runner::~Runner() = default;

namespace {

std::optional<std::string> skip_reason(const Registry& registry, const Contract& contract,
                                       const OpDef& op, const Impl& impl, const CaseSpec& spec) {
  if (auto reason = contract.dtype_skip_reason(spec.dtype_name)) return reason;
  if (!registry.backend_available(impl.backend())) {
    return "backend unavailable: " + registry.backend_reason(impl.backend());
  }
  if (spec.pass == Pass::backward && !op.has_backward) return "op " + op.name + " has no backward pass";
  if (!impl.supports(spec.pass)) return "impl " + impl.name() + " has no " + to_string(spec.pass) + " pass";
  if (op.shape_problem) {
    if (auto problem = op.shape_problem(spec)) return "shape invalid: " + *problem;
  }
  if (auto reason = impl.skip_reason(spec)) return reason;
  // Last, once the case is known to be valid: a device case too large for the free memory.
  return device_memory_skip_reason(registry, op, impl, spec);
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

void compare_rows(const std::string& layout, const std::string& reference_layout,
                  const TensorDecl& decl, const LayoutResult& expected, const LayoutResult& actual,
                  const std::vector<std::int64_t>& rows, CaseResult& result) {
  DriftComparator comparator(decl.name, decl.dtype);
  for (std::int64_t row : rows) {
    comparator.compare_row(row, expected.rows.at(decl.name), row, actual.rows.at(decl.name), row);
  }
  ++result.layout_comparisons;
  DriftMetrics metrics = comparator.metrics();
  metrics.layout = layout;
  metrics.reference_layout = reference_layout;
  if (metrics.drifted()) result.drift.push_back(metrics);
}

DriftMetrics compare_whole(const std::string& layout, const std::string& reference_layout,
                           const TensorDecl& decl, const Tensor& expected, const Tensor& actual) {
  DriftComparator comparator(decl.name, decl.dtype);
  for (std::int64_t row = 0; row < expected.rows(); ++row) {
    comparator.compare_row(row, expected, row, actual, row);
  }
  DriftMetrics metrics = comparator.metrics();
  metrics.layout = layout;
  metrics.reference_layout = reference_layout;
  return metrics;
}

std::string fingerprint_outputs(const std::vector<TensorDecl>& decls, const LayoutResult& canonical,
                                const LayoutResult* reductions,
                                const std::vector<std::int64_t>& rows) {
  std::uint64_t hash = 0;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_output) {
      const Tensor& tensor = canonical.rows.at(decl.name);
      std::size_t row_bytes = static_cast<std::size_t>(tensor.row_size()) * dtype_size(tensor.dtype());
      hash = fingerprint_bytes(decl.name.data(), decl.name.size(), hash);
      for (std::int64_t row : rows) {
        hash = fingerprint_bytes(static_cast<const std::byte*>(tensor.data()) + row_bytes * static_cast<std::size_t>(row),
                                 row_bytes, hash);
      }
    } else if (decl.role == TensorRole::reduction_output && reductions) {
      const Tensor& tensor = reductions->reductions.at(decl.name);
      hash = fingerprint_bytes(decl.name.data(), decl.name.size(), hash);
      hash = fingerprint_bytes(tensor.data(), tensor.bytes(), hash);
    }
  }
  return fingerprint_hex(hash);
}

}  // namespace

CaseResult Runner::run_case(const CaseSpec& spec, CaseArtifacts* artifacts) {
  auto case_start = Clock::now();
  CaseResult result;
  result.spec = spec;
  const OpDef* op = state_->registry.find_op(spec.op);
  Impl* impl = op ? state_->registry.find_impl(spec.op, spec.impl) : nullptr;
  if (!impl) throw std::logic_error("case names an unregistered op or impl: " + spec.id());
  result.backend = impl->backend();
  result.is_control = !impl->claims_invariance();
  result.expected_to_drift = impl->expected_to_drift(spec.pass);
  if (auto reason = skip_reason(state_->registry, state_->contract, *op, *impl, spec)) {
    result.verdict = Verdict::skipped;
    result.reason = *reason;
    return result;
  }

  try {
    std::vector<TensorDecl> decls = op->tensors(spec);
    bool has_rows = false, has_reductions = false;
    for (const auto& decl : decls) {
      has_rows = has_rows || decl.role == TensorRole::row_output;
      has_reductions = has_reductions || decl.role == TensorRole::reduction_output;
    }

    const std::int64_t rows = op->logical_rows ? op->logical_rows(spec) : spec.rows;
    auto inputs_start = Clock::now();
    Inputs inputs;
    for (const auto& decl : decls) {
      if (decl.role == TensorRole::parameter) {
        auto [tensor, id] = state_->parameter(decl, spec.seed);
        inputs.tensors[decl.name] = tensor;
        inputs.ids[decl.name] = id;
      } else if (decl.role == TensorRole::row_input) {
        inputs.tensors[decl.name] = std::make_shared<const Tensor>(
            generate(decl, full_shape(decl, rows), spec.seed, spec.special_values));
        inputs.ids[decl.name] = State::next_input_id();
      }
    }
    result.timings.inputs_seconds = seconds_since(inputs_start);

    std::vector<std::int64_t> alone_rows = select_alone_rows(spec, rows);
    const std::string canonical_rows_layout = op->make_layout ? op->canonical_layout : canonical_layout;
    // nullopt: the layout does not apply to this op or case (an op's own layout names and the
    // generic ones are disjoint), so it is not run.
    auto build_layout = [&](const std::string& name) -> std::optional<Layout> {
      if (op->make_layout) return op->make_layout(name, spec);
      if (!is_known_layout(name)) return std::nullopt;
      return make_layout(name, spec, alone_rows, impl->token_granularity());
    };
    std::vector<std::string> layout_names = spec.layouts;
    auto ensure = [&](const std::string& name) {
      if (std::find(layout_names.begin(), layout_names.end(), name) == layout_names.end()) {
        layout_names.insert(layout_names.begin(), name);
      }
    };
    // The batch layout is the reference for token reductions and for rows outside the alone
    // sample, so it runs whenever either exists.
    // It also holds the trajectory a composed op's per-call references follow.
    if (has_reductions || op->reference_along ||
        (has_rows && static_cast<std::int64_t>(alone_rows.size()) < rows)) {
      ensure(canonical_reduction_layout);
    }
    if (has_rows) ensure(canonical_rows_layout);

    // Canonical layouts first, so every other layout is compared as soon as it has run and its
    // outputs (gigabytes for GPU-sized cases) are dropped right away.
    auto reference_rank = [&](const std::string& name) {
      if (name == canonical_rows_layout && has_rows) return 0;
      if (name == canonical_reduction_layout) return 1;
      return 2;
    };
    std::stable_sort(layout_names.begin(), layout_names.end(), [&](const std::string& a, const std::string& b) {
      return reference_rank(a) < reference_rank(b);
    });
    std::map<std::string, LayoutResult> results;
    const LayoutResult* alone = nullptr;
    const LayoutResult* packed = nullptr;
    auto compare_layout = [&](const std::string& name, const LayoutResult& layout_result) {
      auto compare_start = Clock::now();
      for (const auto& decl : decls) {
        if (decl.role == TensorRole::row_output && name != canonical_rows_layout) {
          std::vector<std::int64_t> against_alone, against_batch;
          for (std::int64_t row = 0; row < rows; ++row) {
            if (!layout_result.present[static_cast<std::size_t>(row)]) continue;
            if (alone->present[static_cast<std::size_t>(row)]) {
              against_alone.push_back(row);
            } else if (packed && name != canonical_reduction_layout) {
              against_batch.push_back(row);  // rows outside the alone sample: against the batch
            }
          }
          compare_rows(name, canonical_rows_layout, decl, *alone, layout_result, against_alone, result);
          if (!against_batch.empty()) {
            compare_rows(name, canonical_reduction_layout, decl, *packed, layout_result, against_batch, result);
          }
        }
        if (decl.role == TensorRole::reduction_output && name != canonical_reduction_layout) {
          if (!build_layout(name)->covers_all_rows_in_order) continue;
          ++result.layout_comparisons;
          DriftMetrics metrics = compare_whole(name, canonical_reduction_layout, decl,
                                               packed->reductions.at(decl.name),
                                               layout_result.reductions.at(decl.name));
          if (metrics.drifted()) result.drift.push_back(metrics);
        }
      }
      result.timings.compare_seconds += seconds_since(compare_start);
    };
    for (const auto& name : layout_names) {
      std::optional<Layout> built = build_layout(name);
      if (!built) continue;
      const Layout& layout = *built;
      bool canonical = (name == canonical_rows_layout && has_rows) ||
                       (name == canonical_reduction_layout && has_reductions);
      int runs = canonical ? spec.repeats : 1;
      for (int repeat = 0; repeat < runs; ++repeat) {
        // Reductions are compared in the batch layout (the reference) and in layouts holding
        // every token in order; kept for a dump too.
        const bool reductions_wanted = name == canonical_reduction_layout ||
                                       layout.covers_all_rows_in_order || artifacts != nullptr;
        LayoutResult run = state_->execute(layout, *impl, spec, rows, decls, inputs, result.impl_config,
                                           result.timings.impl_seconds, reductions_wanted);
        if (repeat == 0) {
          if (reference_rank(name) < 2) {
            results.emplace(name, std::move(run));
            if (reference_rank(name) == 0) alone = &results.at(name);
            if (reference_rank(name) == 1) {
              packed = &results.at(name);
              if (alone) compare_layout(name, *packed);  // the batch is checked against alone too
            }
          } else {
            compare_layout(name, run);
            if (artifacts) results.emplace(name, std::move(run));
          }
          continue;
        }
        // Determinism: the canonical layout run again must give identical bits.
        auto compare_start = Clock::now();
        const LayoutResult& first = results.at(name);
        for (const auto& decl : decls) {
          if (!is_output(decl)) continue;
          const Tensor& a = decl.role == TensorRole::row_output ? first.rows.at(decl.name) : first.reductions.at(decl.name);
          const Tensor& b = decl.role == TensorRole::row_output ? run.rows.at(decl.name) : run.reductions.at(decl.name);
          DriftMetrics metrics = compare_whole(name + " repeat " + std::to_string(repeat + 1), name, decl, a, b);
          if (metrics.drifted()) result.nondeterminism.push_back(metrics);
        }
        result.timings.compare_seconds += seconds_since(compare_start);
      }
      result.layouts_run.push_back(name);
    }

    // Accuracy: the canonical outputs against the FP32 reference on the same rounded inputs.
    auto reference_start = Clock::now();
    ReferenceRequest request{alone_rows, {}, {}};
    for (const auto& decl : decls) {
      if (decl.role == TensorRole::reduction_output && request.reduction_rows.empty()) {
        request.reduction_rows = reduction_sample(decl.shape.empty() ? 1 : decl.shape[0], spec.seed);
      }
      std::int64_t width = 1;
      for (std::int64_t extent : decl.shape) width *= extent;
      if (decl.role == TensorRole::row_output && width > static_cast<std::int64_t>(max_reference_columns)) {
        request.columns[decl.name] = reduction_sample(width, spec.seed ^ hash_name(decl.name), max_reference_columns);
      }
    }
    // Row inputs are owned by this case alone once every layout has run: moved, not copied
    // (gigabytes for vocab-sized backward cases). Cached parameters are shared, so copied.
    std::map<std::string, Tensor> logical_inputs;
    for (auto& [name, tensor] : inputs.tensors) {
      if (tensor.use_count() == 1) {
        logical_inputs.emplace(name, std::move(*std::const_pointer_cast<Tensor>(tensor)));
        tensor.reset();
      } else {
        logical_inputs.emplace(name, *tensor);
      }
    }
    const std::string group = spec.input_group();
    if (op->reference_along) {
      // Per-call references along the impl's own outputs: they belong to this case alone.
      if (!packed) throw std::logic_error(op->name + ": the batch layout did not run");
      state_->reference_group.clear();
      state_->reference.clear();
      op->reference_along(spec, logical_inputs, packed->rows, request, state_->reference);
    } else if (state_->reference_group != group) {
      state_->reference_group.clear();
      state_->reference.clear();
      std::map<std::string, Tensor> fresh;
      op->reference(spec, logical_inputs, request, fresh);
      state_->reference = std::move(fresh);
      state_->reference_group = group;
    }
    const std::map<std::string, Tensor>& reference = state_->reference;
    result.timings.reference_seconds = seconds_since(reference_start);

    auto compare_start = Clock::now();
    NonFiniteRules nonfinite_rules;
    nonfinite_rules.nan_matches_reference =
        spec.special_values > 0 && state_->contract.special_values.nan == "match_reference_position";
    for (const auto& decl : decls) {
      if (!is_output(decl)) continue;
      const auto [threshold_key, threshold_tensor] =
          op->threshold_of ? op->threshold_of(decl.name) : std::make_pair(op->tolerance_key, decl.name);
      const Threshold& threshold = state_->contract.threshold(threshold_key, spec.dtype_name, threshold_tensor);
      if (!reference.count(decl.name)) throw std::logic_error("reference of " + op->name + " did not produce " + decl.name);
      if (decl.role == TensorRole::row_output) {
        auto columns = request.columns.find(decl.name);
        // Along a trajectory: the outputs the references were fed (the batch layout's).
        const LayoutResult& checked = op->reference_along ? *packed : *alone;
        result.accuracy.push_back(check_accuracy(decl.name, checked.rows.at(decl.name), alone_rows,
                                                 reference.at(decl.name), alone_rows,
                                                 threshold.atol, threshold.rtol,
                                                 columns == request.columns.end() ? std::vector<std::int64_t>{} : columns->second,
                                                 nonfinite_rules));
      } else {
        result.accuracy.push_back(check_accuracy(decl.name, packed->reductions.at(decl.name),
                                                 request.reduction_rows, reference.at(decl.name),
                                                 request.reduction_rows, threshold.atol, threshold.rtol, {},
                                                 nonfinite_rules));
      }
    }
    result.fingerprint = fingerprint_outputs(decls, alone ? *alone : *packed, packed, alone_rows);
    result.timings.compare_seconds += seconds_since(compare_start);

    bool accurate = std::all_of(result.accuracy.begin(), result.accuracy.end(),
                                [](const AccuracyMetrics& m) { return m.passed(); });
    result.verdict = !result.nondeterminism.empty() ? Verdict::nondeterministic
                     : !result.drift.empty()        ? Verdict::drift
                     : !accurate                    ? Verdict::inaccurate
                                                    : Verdict::pass;
    if (artifacts) {
      artifacts->inputs = std::move(logical_inputs);
      for (auto& [name, layout_result] : results) {
        auto& outputs = artifacts->layout_outputs[name];
        for (auto& [tensor_name, tensor] : layout_result.rows) outputs.emplace(tensor_name, std::move(tensor));
        for (auto& [tensor_name, tensor] : layout_result.reductions) outputs.emplace(tensor_name, std::move(tensor));
      }
      artifacts->reference = reference;
      artifacts->reference_rows = alone_rows;
    }
    std::size_t reference_bytes = 0;
    for (const auto& entry : reference) reference_bytes += entry.second.bytes();
    if (reference_bytes > max_cached_reference_bytes) {
      state_->reference_group.clear();
      state_->reference.clear();
    }
  } catch (const std::exception& error) {
    result.verdict = Verdict::error;
    result.reason = error.what();
  }
  result.timings.total_seconds = seconds_since(case_start);
  return result;
}

}  // namespace bitcheck
