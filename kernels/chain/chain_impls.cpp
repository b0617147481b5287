// The chain's impls: one composition for every backend. Each call looks up the op's impl in the
// registry and runs it through Impl::run on the chain's invocation (same slots, same segments, its
// own state across the layout's invocations), so a CPU chain and a CUDA chain differ only in the
// impls they name. Per backend: the chain of its invariant impls ("cpu-fixed-order",
// "fixed-order"), and one variant per other impl of an op in the chain, swapped in for that op
// alone ("cpu-fixed-order+matmul=cpu-split-k-by-rows"): the controls' variants are controls; and
// the chain at tp = P, its TP call sites run by the TP impls of one order ("cpu-tp-fixed-order",
// chain_tp.cpp).
#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>

#include "chain/chain.h"
#include "common/elementwise_math.h"
#include "core/phase_profile.h"
#include "run/device_memory.h"
#include "run/host_held_output.h"

namespace bitcheck {
namespace {

using chain::SharedTensor;

const char* const chain_ops[] = {"embedding",    "rmsnorm", "matmul",  "rope",    "attention",
                                 "residual_add", "swiglu",  "lm_head", "logprob", "moe"};

std::vector<std::int64_t> full_shape(const TensorDecl& decl, std::int64_t rows) {
  std::vector<std::int64_t> shape = {rows};
  shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
  return shape;
}

// Each call's impl state across the invocations of one layout execution (a KV cache, a device
// dW accumulator), keyed by call name.
struct ChainState {
  std::map<std::string, std::shared_ptr<void>> calls;
};

class ChainImpl;

// The case of one call for its impl: a component that runs on one rank gets tp = 1, a TP one the
// ranks of the invocation (`tp`).
CaseSpec component_spec(const CaseSpec& chain_spec, const chain::Call& call, const Impl& impl,
                        int tp) {
  CaseSpec spec = chain::call_spec(chain_spec, call, impl.name());
  spec.tp = impl.tensor_parallelism().max_tp > 1 ? tp : 1;
  return spec;
}

class ImplExecutor : public chain::Executor {
 public:
  ImplExecutor(const ChainImpl& chain, const Registry& registry, Batch& batch, ChainState& state)
      : chain_(chain), registry_(registry), batch_(batch), state_(state) {
    for (const auto& [name, tensor] : batch.inputs)
      ids_[tensor.get()] = {tensor, batch.input_ids.at(name)};
  }
  std::int64_t rows() const override { return batch_.slots(); }
  chain::ValueMap run(const chain::Call& call, const CaseSpec& spec,
                      const chain::ValueMap& inputs) override;
  bool glue_on_device() const override;
  // Whether the calls leave their rows on the device: where the runner lets the chain's, unless
  // shards of a sweep share the GPU (device_shared_by_shards). There every wait for the GPU lasts
  // while the others' work runs, and handing each of a decode step's rows over and reading it
  // back took the nightly's chain bookkeeping from 23 s to 307 s: the calls bring their rows to
  // the host as before.
  bool rows_on_device() const;
  // The seconds spent in the component impls' calls: the rest of a chain call's time is its own
  // bookkeeping (it copies no outputs: they are moved into the chain's, accumulators in and out).
  double component_seconds() const { return component_seconds_; }

 private:
  // The runner's id for its inputs; a fresh one for each value the chain made (kept alive here so
  // no later value can reuse its address within the invocation).
  std::uint64_t id_of(const chain::SharedValue& value) {
    const void* key = value->device() ? static_cast<const void*>(value->device().get())
                                      : static_cast<const void*>(value->host().get());
    auto [it, inserted] = ids_.try_emplace(key, value, 0);
    if (inserted) it->second.second = new_input_id();
    return it->second.second;
  }

  const ChainImpl& chain_;
  const Registry& registry_;
  Batch& batch_;
  ChainState& state_;
  std::map<const void*, std::pair<std::shared_ptr<const void>, std::uint64_t>> ids_;
  double component_seconds_ = 0;
};

// Whether the chain with `swapped` in every `op` call must drift in the pass: where the swapped
// control must, unless the chain's layouts cannot show it.
bool chain_drifts_with(const std::string& op, const Impl& swapped, Pass pass) {
  // The chain's backward layouts present whole sequences from position 0, where rope's
  // chunk-relative angle is the absolute one: only chunked prefill and decode move it.
  if (op == "rope" && pass == Pass::backward) return false;
  // Nor do its backward invocations hold fewer than 4 tokens, where the CUDA split-K-by-rows
  // controls split: every one holds a whole batch of sequences.
  if (swapped.name() == "split-k-by-rows" && pass == Pass::backward) return false;
  // moe's dW controls chunk each expert's own list of tokens; the chain's layouts that hold every
  // token in order (where dW is compared) are one invocation each, with the same lists.
  if (op == "moe" && !swapped.expected_to_drift(Pass::forward)) return false;
  return swapped.expected_to_drift(pass);
}

// What a component impl that recorded nothing ran: its only declared path.
std::string single_path_of(const Impl& impl) {
  const std::vector<PathDecl> declared = impl.paths();
  return declared.size() == 1 && !declared[0].family ? declared[0].name : unrecorded_path_name;
}

// The chain on one backend: `base` (an invariant impl of every op in the chain), or with `swapped`
// swapped in for every `swapped_op` call. A variant is what its swapped impl is (a control's
// variant is a control) and runs the passes it has: a forward-only control is checked by the
// forward chain, since the backward's layouts are whole sequences, which many such controls cannot
// tell apart.
ImplInfo chain_info(const std::string& base_name, const std::string& backend,
                    const std::map<std::string, Impl*>& base, const std::string& swapped_op,
                    const Impl* swapped) {
  std::string composed;
  for (const auto& [op, impl] : base)
    composed += (composed.empty() ? "" : ", ") + op + "/" + impl->name();
  ImplInfo info =
      ImplInfo::invariant(base_name, backend, "the decoder stack composed of " + composed);
  if (swapped) {
    info.name = base_name + "+" + swapped_op + "=" + swapped->name();
    info.kind = swapped->info().kind;
    info.description = (swapped->claims_invariance() ? "" : "control: ") +
                       std::string("the decoder stack with ") + swapped_op + "/" + swapped->name() +
                       " in every " + swapped_op + " call (" + swapped->description() + ")";
    info.passes = swapped->info().passes;
    info.drifts_in = {};
    for (Pass pass : {Pass::forward, Pass::backward}) {
      if (chain_drifts_with(swapped_op, *swapped, pass)) info.drifts_in.push_back(pass);
    }
  }
  // The components' paths as "<op>:<path>", shown for information: the components' own sweeps
  // are where their paths are required.
  for (const auto& [op, base_impl] : base) {
    const Impl* impl = op == swapped_op && swapped ? swapped : base_impl;
    for (PathDecl decl : impl->paths()) {
      decl.name = op + ":" + decl.name;
      decl.description = op + "/" + impl->name() + ": " + decl.description;
      info.paths.push_back(decl.informative());
    }
  }
  return info;
}

class ChainImpl : public Impl {
 public:
  ChainImpl(const Registry& registry, const std::string& base_name, const std::string& backend,
            std::map<std::string, Impl*> base, std::string swapped_op = "", Impl* swapped = nullptr)
      : Impl(chain_info(base_name, backend, base, swapped_op, swapped)),
        registry_(registry),
        base_(std::move(base)),
        swapped_op_(std::move(swapped_op)),
        swapped_(swapped) {}
  // The chain at tp = P: `sites` run its TP call sites, `base` the others.
  ChainImpl(const Registry& registry, chain::TpChain tp_chain, std::map<std::string, Impl*> base)
      : Impl(std::move(tp_chain.info)),
        registry_(registry),
        base_(std::move(base)),
        sites_(std::move(tp_chain.sites)),
        swapped_(nullptr) {}

  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (swapped_ && !has_call_of(spec, swapped_op_)) {
      return "the chain has no " + swapped_op_ + " call at this shape (" +
             (swapped_op_ == "moe" ? "its MLP is dense: no E" : "its MLP is moe") + ")";
    }
    if (swapped_ && !swapped_->claims_invariance()) {
      const std::int64_t width = swapped_op_ == "residual_add" ? spec.dim("H")
                                 : swapped_op_ == "swiglu"     ? spec.dim("I")
                                                               : 0;
      if (width > 0 && width % elementwise::vector_elements == 0) {
        return swapped_op_ + " rows of the chain are " + std::to_string(width) +
               " elements, a multiple of " + std::to_string(elementwise::vector_elements) +
               ": the control's scalar tail never runs";
      }
    }
    if (auto reason = unobservable_in_dtype(spec)) return reason;
    for (const chain::Call& call : chain::calls(spec)) {
      Impl& impl = impl_for(call);
      if (!impl.supports(call.pass))
        return call.name + ": impl " + call.op + "/" + impl.name() + " has no " +
               to_string(call.pass) + " pass";
      if (auto reason = impl.skip_reason(component_spec(spec, call, impl, spec.tp)))
        return call.name + " (" + call.op + "/" + impl.name() + "): " + *reason;
      if (spec.pass == Pass::backward && impl.token_granularity() > 1) {
        return call.op + "/" + impl.name() + " reduces over chunks of " +
               std::to_string(impl.token_granularity()) +
               " tokens; the chain's layouts split micro-batches at sequence boundaries";
      }
    }
    return std::nullopt;
  }

  static bool has_call_of(const CaseSpec& spec, const std::string& op) {
    for (const chain::Call& call : chain::calls(spec))
      if (call.op == op) return true;
    return false;
  }

  // Controls whose effect the chain's 16-bit dtypes absorb (found on the CPU chain): checked in
  // fp32.
  std::optional<std::string> unobservable_in_dtype(const CaseSpec& spec) const {
    if (!swapped_ || swapped_->claims_invariance() || spec.dtype == DType::fp32)
      return std::nullopt;
    if (swapped_op_ == "embedding" && spec.pass == Pass::backward) {
      // A sequence's few tokens per id add up exactly in the fp32 accumulator, in any order.
      return "the embedding gradient adds a few " + to_string(spec.dtype) +
             " values per id into fp32, exactly in any order: the swap is checked in fp32";
    }
    if (swapped_op_ == "attention" && !swapped_->supports(Pass::forward)) {
      // dq's key-block partials added in another order: a few fp32 ulps, inside one 16-bit ulp.
      return "dq partials added in another order differ by fp32 ulps that the " +
             to_string(spec.dtype) +
             " rounding of dq absorbs at the chain's sequence lengths: the swap is checked in fp32";
    }
    if (swapped_op_ == "rope") {
      // At a sequence's positions the chunk-relative angle is off by about one fp32 ulp, which
      // the rounding of the rotated q and k to 16 bits nearly always absorbs.
      return "a chunk-relative angle at the chain's positions differs by an fp32 ulp, which the " +
             to_string(spec.dtype) + " rounding of q and k absorbs: the swap is checked in fp32";
    }
    return std::nullopt;
  }

  void run(Batch& batch) override {
    if (batch.invocation->segments.empty())
      throw std::invalid_argument("the chain needs a sequence layout (segments)");
    if (!batch.layout_state) batch.layout_state = std::make_shared<ChainState>();
    auto& state = *static_cast<ChainState*>(batch.layout_state.get());
    // Each token's position in its sequence, from the invocation's segments; pad slots hold the
    // i32 poison (no impl may read them).
    Tensor positions(DType::i32, {batch.slots(), 1});
    positions.fill_nan();
    for (const Segment& segment : batch.invocation->segments) {
      for (std::int64_t i = 0; i < segment.length; ++i) {
        positions.set_int(segment.first_slot + i,
                          static_cast<std::int32_t>(segment.start_position + i));
      }
    }
    chain::ValueMap inputs;
    for (const auto& [name, tensor] : batch.inputs) inputs[name] = chain::host_value(tensor);
    inputs["positions"] = chain::host_value(std::make_shared<const Tensor>(std::move(positions)));
    ImplExecutor executor(*this, registry_, batch, state);
    const auto start = std::chrono::steady_clock::now();
    chain::compose(*batch.spec, inputs, executor);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record_phase(Phase::bookkeeping, std::max(0.0, seconds - executor.component_seconds()));
  }

  Impl& impl_for(const chain::Call& call) const {
    auto site = sites_.find(chain::site_of(call.name));
    if (site != sites_.end()) return *site->second;
    if (swapped_ && call.op == swapped_op_ && swapped_->supports(call.pass)) return *swapped_;
    return *base_.at(call.op);
  }

 private:
  const Registry& registry_;
  std::map<std::string, Impl*> base_;
  std::map<std::string, Impl*> sites_;
  std::string swapped_op_;
  Impl* swapped_;
};

// Where the runner lets the calls' rows stay on the device, the glue between calls runs there
// too, except in the layout every other one's rows are compared against: that one moves them
// through the host, so a difference between the two ways shows as drift. An invocation of a few
// rows (a decode step, a short chunk) moves them through the host as well: its glue is a few
// kilobytes, and each device operation waits for the GPU.
// (Held outputs of a backend without a device, BITCHECK_SIMULATE_DEVICE_OUTPUTS, wait for no GPU:
// every invocation's glue runs "there".)
bool ImplExecutor::glue_on_device() const {
  const bool waits_for_gpu = registry_.device_backend(chain_.backend()) != nullptr;
  return rows_on_device() && !batch_.rows_reference &&
         (!waits_for_gpu || batch_.slots() >= chain::device_glue_min_rows);
}

bool ImplExecutor::rows_on_device() const {
  return batch_.rows_stay_on_device &&
         (registry_.device_backend(chain_.backend()) == nullptr || !device_shared_by_shards());
}

chain::ValueMap ImplExecutor::run(const chain::Call& call, const CaseSpec& call_case,
                                  const chain::ValueMap& inputs) {
  Impl& impl = chain_.impl_for(call);
  CaseSpec spec = component_spec(call_case, call, impl, batch_.tp);
  Batch batch;
  batch.spec = &spec;
  batch.tp = spec.tp;
  batch.invocation = batch_.invocation;
  batch.invocation_index = batch_.invocation_index;
  batch.invocation_count = batch_.invocation_count;
  batch.reductions_wanted = batch_.reductions_wanted;
  // The calls' rows and token reductions stay where they are made when the runner lets the
  // chain's (its rows are the calls'); the calls' row inputs are read there by the impls that can.
  batch.rows_stay_on_device = rows_on_device();
  batch.reductions_stay_on_device = batch_.reductions_stay_on_device;
  batch.rows_reference = batch_.rows_reference;
  batch.parameters_in_use = batch_.inputs.size();  // the chain's inputs: every layer's parameters
  batch.layout_state = state_.calls[call.name];
  const bool device_inputs = glue_on_device() && impl.info().row_inputs_on_device;
  const std::vector<TensorDecl> decls = registry_.find_op(call.op)->tensors(spec);
  for (const TensorDecl& decl : decls) {
    const std::string chain_name = call.name + "." + decl.name;
    if (decl.role == TensorRole::row_input || decl.role == TensorRole::parameter) {
      auto input = inputs.find(decl.name);
      const auto expected =
          decl.role == TensorRole::row_input ? full_shape(decl, rows()) : decl.shape;
      if (input == inputs.end() || input->second->shape() != expected ||
          input->second->dtype() != decl.dtype) {
        throw std::logic_error("chain: " + call.name + " needs " + decl.name + " as " +
                               to_string(decl.dtype) + shape_string(expected));
      }
      const chain::SharedValue& value = input->second;
      if (decl.role == TensorRole::row_input && device_inputs && value->device()) {
        batch.device_inputs[decl.name] = value->device();
      } else {
        batch.inputs[decl.name] = value->host();
      }
      batch.input_ids[decl.name] = id_of(value);
    } else if (decl.role == TensorRole::row_output) {
      batch.outputs.emplace(decl.name, Tensor::poisoned(decl.dtype, full_shape(decl, rows())));
    } else {
      // The accumulator carried across the layout's invocations, moved in under the op's shape
      // and back after the call.
      Tensor accumulator = std::move(batch_.out(chain_name));
      accumulator.reshape(decl.shape);
      batch.outputs.emplace(decl.name, std::move(accumulator));
    }
  }
  {
    // The call's paths, recorded as "<op>:<path>" (one declared per component path).
    std::set<std::string> taken;
    {
      PathRecording recording;
      const auto start = std::chrono::steady_clock::now();
      impl.run(batch);
      component_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      taken = recording.paths();
    }
    // A call with nothing for the checks to read (only token reductions, in a layout that does
    // not hold every token in order) may run nothing: no path, as the runner does for a layout.
    const bool checked = batch.reductions_wanted ||
                         std::any_of(decls.begin(), decls.end(), [](const TensorDecl& decl) {
                           return decl.role == TensorRole::row_output;
                         });
    if (taken.empty() && checked) taken.insert(single_path_of(impl));
    for (const auto& path : taken) record_path(call.op + ":" + path);
  }
  state_.calls[call.name] = batch.layout_state;
  if (!batch.impl_config.is_null()) batch_.impl_config["calls"][call.name] = batch.impl_config;
  // A host impl under BITCHECK_SIMULATE_DEVICE_OUTPUTS: its rows as if left on a device, so the
  // chain's device glue runs on the CPU backend too (in host-held outputs).
  const bool simulated = batch.rows_stay_on_device && simulate_device_outputs() &&
                         registry_.device_backend(impl.backend()) == nullptr;
  chain::ValueMap result;
  for (const TensorDecl& decl : decls) {
    if (decl.role != TensorRole::row_output && decl.role != TensorRole::reduction_output) continue;
    const std::string chain_name = call.name + "." + decl.name;
    const bool row = decl.role == TensorRole::row_output;
    if (row && simulated && !batch.device_outputs.count(decl.name)) {
      batch.device_outputs[decl.name] =
          std::make_shared<HostHeldOutput>(std::move(batch.out(decl.name)));
    }
    auto on_device = batch.device_outputs.find(decl.name);
    if (on_device != batch.device_outputs.end()) {
      // Left on the device: handed on under the chain's name (the same bytes; a reduction's
      // flattened shape is only the host's view of them), a row output read by the next calls
      // there too.
      if (row) {
        result[decl.name] = std::make_shared<const chain::Value>(
            decl.dtype, full_shape(decl, rows()), on_device->second);
      }
      batch_.device_outputs[chain_name] = std::move(on_device->second);
      continue;
    }
    Tensor& output = batch.out(decl.name);
    const auto expected = row ? full_shape(decl, rows()) : decl.shape;
    if (output.shape() != expected || output.dtype() != decl.dtype) {
      throw std::runtime_error("chain: " + call.name + " (" + call.op + "/" + impl.name() +
                               ") returned " + decl.name + " as " + to_string(output.dtype()) +
                               shape_string(output.shape()));
    }
    Tensor& chain_output = batch_.out(chain_name);
    if (!row) {
      chain_output = std::move(output);
      chain_output.reshape({1, chain_output.numel()});
      continue;
    }
    // Moved into the chain's outputs, not copied; later calls read it there (aliased: the
    // invocation's outputs outlive the composition).
    chain_output = std::move(output);
    result[decl.name] = chain::host_value(SharedTensor(&chain_output, [](const Tensor*) {}));
  }
  return result;
}

}  // namespace

void register_chain_impls(Registry& registry) {
  struct Base {
    std::string backend, impl;
  };
  for (const Base& base : {Base{"cpu", "cpu-fixed-order"}, Base{"cuda", "fixed-order"}}) {
    std::map<std::string, Impl*> impls;
    for (const char* op : chain_ops) {
      Impl* impl = registry.find_impl(op, base.impl);
      if (impl && impl->backend() == base.backend && impl->claims_invariance()) impls[op] = impl;
    }
    if (impls.size() != std::size(chain_ops)) continue;  // the backend is not built
    registry.add_impl("chain",
                      std::make_unique<ChainImpl>(registry, base.impl, base.backend, impls));
    for (chain::TpChain& tp_chain : chain::tp_chains(registry, base.backend, impls))
      registry.add_impl("chain", std::make_unique<ChainImpl>(registry, std::move(tp_chain), impls));
    for (const char* op : chain_ops) {
      for (Impl* impl : registry.impls(op)) {
        if (impl->backend() != base.backend || impl == impls.at(op)) continue;
        // The chain runs on one rank: an impl split over ranks has no call in it.
        if (impl->tensor_parallelism().max_tp > 1) continue;
        // Nor a control whose drift is built into one layout of its own op (graph capture): the
        // chain's calls never run in it.
        if (!impl->info().drifts_only_in_layout.empty()) continue;
        registry.add_impl("chain", std::make_unique<ChainImpl>(registry, base.impl, base.backend,
                                                               impls, op, impl));
      }
    }
  }
}

}  // namespace bitcheck
