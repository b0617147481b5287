// chain: the decoder stack as one op. Its tensors are every call's outputs ("<call>.<tensor>", in
// execution order, so the runner's layout comparison checks each one), its layouts are attention's
// sequence layouts plus two that hold every token in order (for the token reductions), and each
// call is checked against its own op's FP32 reference on the inputs the impl gave it, under its
// own op's contract row.
#include "chain/chain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>

#include "attention/attention.h"
#include "core/error.h"
#include "core/host_threads.h"
#include "core/rng.h"
#include "moe/moe.h"
#include "run/layout.h"

namespace bitcheck {
namespace {

using chain::SharedTensor;
using chain::TensorMap;
using OpDefs = std::map<std::string, OpDef>;

const char* const padded_in_order = "padded_in_order";

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (std::int64_t extent : shape) count *= extent;
  return count;
}

// A parameter's chain name: the embedding table is tied (embed and lm_head share "table"); every
// other weight belongs to its forward call.
std::string parameter_name(const chain::Call& call, const TensorDecl& decl) {
  return decl.name == "table" ? decl.name : call.name + "." + decl.name;
}

std::vector<TensorDecl> chain_tensors(const OpDefs& ops, const CaseSpec& spec) {
  const std::int64_t vocab = spec.dim("V");
  std::vector<TensorDecl> decls = {
      {"ids", TensorRole::row_input, DType::i32, {1}, Generator::token_id, 1.0f, vocab},
      {"target", TensorRole::row_input, DType::i32, {1}, Generator::token_id, 1.0f, vocab},
  };
  if (spec.pass == Pass::backward)
    decls.push_back({"dlogprob", TensorRole::row_input, DType::fp32, {1}});
  std::vector<TensorDecl> outputs;
  for (const chain::Call& call : chain::calls(spec)) {
    for (TensorDecl decl : ops.at(call.op).tensors(chain::call_spec(spec, call, ""))) {
      if (decl.role == TensorRole::parameter && call.name.rfind("bwd.", 0) != 0) {
        decl.name = parameter_name(call, decl);
        // The chain's weights stay finite, the tied table too (embedding's cases give it special
        // values): one NaN in it would reach every row through lm_head and hide what drifts.
        decl.takes_special_values = false;
        bool known = std::any_of(decls.begin(), decls.end(),
                                 [&](const TensorDecl& d) { return d.name == decl.name; });
        if (!known) decls.push_back(decl);
      } else if (decl.role == TensorRole::row_output) {
        decl.name = call.name + "." + decl.name;
        outputs.push_back(decl);
      } else if (decl.role == TensorRole::reduction_output) {
        // Flattened to one row: every reduction is checked whole against its reference, whatever
        // its shape (the runner samples the rows of one reduction shape per case).
        outputs.push_back({call.name + "." + decl.name,
                           TensorRole::reduction_output,
                           DType::fp32,
                           {1, element_count(decl.shape)}});
      }
    }
  }
  decls.insert(decls.end(), outputs.begin(), outputs.end());
  return decls;
}

// One call's FP32 reference as the composition asked for it: the call, its spec and the inputs
// the impl gave it (shared, so they outlive the composition's own copies).
struct PendingReference {
  chain::Call call;
  CaseSpec spec;
  TensorMap inputs;
};

// Collects each call's reference on the impl's own outputs: the calls are fed the trajectory
// (the impl's row outputs by chain name, all logical rows), never the reference, so each call is
// checked on exactly the inputs the impl gave it, and no call's reference depends on another's.
class ReferenceExecutor : public chain::Executor {
 public:
  ReferenceExecutor(const OpDefs& ops, std::int64_t rows,
                    const std::map<std::string, Tensor>& trajectory)
      : ops_(ops), rows_(rows), trajectory_(trajectory) {}
  std::int64_t rows() const override { return rows_; }

  chain::ValueMap run(const chain::Call& call, const CaseSpec& spec,
                      const chain::ValueMap& inputs) override {
    chain::ValueMap result;
    for (const TensorDecl& decl : ops_.at(call.op).tensors(spec)) {
      if (decl.role != TensorRole::row_output) continue;
      const std::string name = call.name + "." + decl.name;
      auto impl_output = trajectory_.find(name);
      if (impl_output == trajectory_.end())
        throw std::logic_error("chain reference: the impl's outputs have no " + name);
      // Aliased, not copied: the trajectory outlives the composition.
      result[decl.name] =
          chain::host_value(SharedTensor(&impl_output->second, [](const Tensor*) {}));
    }
    TensorMap host_inputs;
    for (const auto& [name, value] : inputs) host_inputs[name] = value->host();
    pending.push_back({call, spec, std::move(host_inputs)});
    return result;
  }

  std::vector<PendingReference> pending;  // in execution order

 private:
  const OpDefs& ops_;
  std::int64_t rows_;
  const std::map<std::string, Tensor>& trajectory_;
};

// An fp32 reduction's reference as one row of `elements`, its bytes copied as they are (an fp32
// element read and written again keeps its bits).
Tensor flattened(const Tensor& reduction, const std::string& what, std::int64_t elements) {
  if (reduction.dtype() != DType::fp32 || reduction.numel() != elements) {
    throw std::logic_error("chain reference: " + what + " is " + to_string(reduction.dtype()) +
                           shape_string(reduction.shape()) + ", expected fp32 of " +
                           std::to_string(elements) + " elements");
  }
  Tensor flat(DType::fp32, {1, elements});
  std::memcpy(flat.data(), reduction.data(), reduction.bytes());
  return flat;
}

// One call's reference by chain name: row outputs for the requested rows (and columns),
// reductions whole, flattened to one row.
std::map<std::string, Tensor> call_reference(const OpDef& op, const PendingReference& pending,
                                             const ReferenceRequest& wanted) {
  const chain::Call& call = pending.call;
  std::map<std::string, Tensor> op_inputs;
  ReferenceRequest request;
  request.rows = wanted.rows;
  const std::vector<TensorDecl> decls = op.tensors(pending.spec);
  for (const TensorDecl& decl : decls) {
    if (decl.role == TensorRole::row_input || decl.role == TensorRole::parameter) {
      op_inputs.emplace(decl.name, *pending.inputs.at(decl.name));
    } else if (decl.role == TensorRole::reduction_output) {
      for (std::int64_t r = 0; r < decl.shape[0]; ++r) request.reduction_rows.push_back(r);
    } else if (auto columns = wanted.columns.find(call.name + "." + decl.name);
               columns != wanted.columns.end()) {
      request.columns[decl.name] = columns->second;
    }
  }
  std::map<std::string, Tensor> reference;
  op.reference(pending.spec, op_inputs, request, reference);
  std::map<std::string, Tensor> outputs;
  for (const TensorDecl& decl : decls) {
    const std::string name = call.name + "." + decl.name;
    if (decl.role == TensorRole::row_output) {
      outputs[name] = std::move(reference.at(decl.name));
    } else if (decl.role == TensorRole::reduction_output) {
      outputs[name] =
          flattened(reference.at(decl.name), call.op + " " + decl.name, element_count(decl.shape));
    }
  }
  return outputs;
}

// Threads for the calls' references: BITCHECK_REFERENCE_THREADS when set (a count >= 1), else the
// process's host threads (core/host_threads.h), at most 8 (each thread holds one call's FP32
// matrices, vocab-sized for lm_head).
std::size_t reference_threads() {
  constexpr std::size_t most = 8;
  if (const char* value = std::getenv("BITCHECK_REFERENCE_THREADS")) {
    char* end = nullptr;
    const unsigned long count = std::strtoul(value, &end, 10);
    if (end == value || *end != '\0' || count == 0) {
      throw BadInput("environment", "BITCHECK_REFERENCE_THREADS",
                     "a thread count >= 1, got \"" + std::string(value) + "\"");
    }
    return count;
  }
  return std::clamp<std::size_t>(host_threads(), 1, most);
}

// The elements a call's reference reads and writes: its row tensors over the case's `rows`, its
// parameters and its reductions (the vocab-sized table gradients cost the most).
std::int64_t reference_elements(const OpDef& op, const PendingReference& pending,
                                std::int64_t rows) {
  std::int64_t elements = 0;
  for (const TensorDecl& decl : op.tensors(pending.spec)) {
    const bool per_row = decl.role == TensorRole::row_input || decl.role == TensorRole::row_output;
    elements += element_count(decl.shape) * (per_row ? rows : 1);
  }
  return elements;
}

// The pending calls' indices, the costliest first, so that the long ones do not start last.
std::vector<std::size_t> largest_first(const OpDefs& ops,
                                       const std::vector<PendingReference>& pending,
                                       std::int64_t rows) {
  std::vector<std::int64_t> elements;
  for (const PendingReference& call : pending)
    elements.push_back(reference_elements(ops.at(call.call.op), call, rows));
  std::vector<std::size_t> order(pending.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return elements[a] > elements[b]; });
  return order;
}

// Every pending call's reference, each by the same code whatever thread computes it (so the
// bits do not depend on the thread count), into `outputs` in execution order. The first error in
// execution order is rethrown once every thread has finished.
void compute_references(const OpDefs& ops, const std::vector<PendingReference>& pending,
                        std::int64_t rows, const ReferenceRequest& wanted,
                        std::map<std::string, Tensor>& outputs) {
  std::vector<std::map<std::string, Tensor>> results(pending.size());
  std::vector<std::exception_ptr> errors(pending.size());
  const std::vector<std::size_t> order = largest_first(ops, pending, rows);
  run_on_threads(order.size(), std::min(reference_threads(), pending.size()),
                 [&](std::size_t taken) {
                   const std::size_t i = order[taken];
                   try {
                     results[i] = call_reference(ops.at(pending[i].call.op), pending[i], wanted);
                   } catch (...) {
                     errors[i] = std::current_exception();
                   }
                 });
  for (std::size_t i = 0; i < pending.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    for (auto& [name, tensor] : results[i]) outputs[name] = std::move(tensor);
  }
}

void chain_reference(const OpDefs& ops, const CaseSpec& spec,
                     const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, Tensor>& trajectory,
                     const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
  const std::vector<std::int64_t> offsets = attention::sequence_offsets(spec);
  const std::int64_t rows = offsets.back();
  chain::ValueMap shared;
  for (const auto& [name, tensor] : inputs)
    shared[name] = chain::host_value(SharedTensor(&tensor, [](const Tensor*) {}));
  Tensor positions(DType::i32, {rows, 1});
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    for (std::int64_t r = offsets[s]; r < offsets[s + 1]; ++r)
      positions.set_int(r, static_cast<std::int32_t>(r - offsets[s]));
  }
  shared["positions"] = chain::host_value(std::make_shared<const Tensor>(std::move(positions)));
  ReferenceExecutor executor(ops, rows, trajectory);
  chain::compose(spec, shared, executor);
  compute_references(ops, executor.pending, rows, request, outputs);
}

// Appends every token of `sequence` as one segment starting at position 0.
void append_sequence(Invocation& invocation, const std::vector<std::int64_t>& offsets,
                     std::int64_t sequence) {
  const std::int64_t first = offsets[static_cast<std::size_t>(sequence)],
                     length = offsets[static_cast<std::size_t>(sequence) + 1] - first;
  invocation.segments.push_back(Segment{sequence, invocation.slots(), length, 0});
  for (std::int64_t r = first; r < first + length; ++r) invocation.slot_rows.push_back(r);
}

// The layouts holding every token once, in order, in addition to attention's: "batch" (all
// sequences packed in order: the reference for token reductions) and "padded_in_order" (each
// sequence in a block of longest + a random margin slots, NaN pads after it, sequences in order).
std::optional<Layout> in_order_layout(const std::string& name, const CaseSpec& spec) {
  const std::vector<std::int64_t> offsets = attention::sequence_offsets(spec);
  const auto sequences = static_cast<std::int64_t>(offsets.size()) - 1;
  Invocation invocation;
  if (name == canonical_reduction_layout) {
    for (std::int64_t s = 0; s < sequences; ++s) append_sequence(invocation, offsets, s);
    return Layout{name, {std::move(invocation)}, true};
  }
  if (name != padded_in_order) return std::nullopt;
  std::int64_t longest = 0;
  for (std::int64_t s = 0; s < sequences; ++s)
    longest = std::max(
        longest, offsets[static_cast<std::size_t>(s) + 1] - offsets[static_cast<std::size_t>(s)]);
  LayoutRandom random(spec.seed ^ hash_name(std::string("chain/") + padded_in_order) ^
                      static_cast<std::uint64_t>(spec.rows));
  const std::int64_t block = longest + random.uniform_int(1, 3);
  for (std::int64_t s = 0; s < sequences; ++s) {
    append_sequence(invocation, offsets, s);
    invocation.slot_rows.resize(
        static_cast<std::size_t>(invocation.segments.back().first_slot + block), -1);
  }
  return Layout{name, {std::move(invocation)}, true};
}

}  // namespace

void register_chain_op(Registry& registry) {
  auto ops = std::make_shared<OpDefs>();
  for (const char* name : {"embedding", "rmsnorm", "matmul", "rope", "attention", "residual_add",
                           "swiglu", "lm_head", "logprob", "moe"}) {
    const OpDef* op = registry.find_op(name);
    if (!op)
      throw std::logic_error(std::string("the chain needs op ") + name + ", registered before it");
    ops->emplace(name, *op);
  }
  const OpDef& attention_op = ops->at("attention");
  OpDef op;
  op.name = "chain";
  op.summary =
      "decoder stack of the ops: embedding -> layers x [rmsnorm, qkv matmul, rope, attention, o "
      "matmul, residual add, "
      "rmsnorm, gate/up matmul, swiglu, down matmul, residual add] -> rmsnorm -> lm_head (tied) -> "
      "logprob; backward "
      "through the same ops in reverse; with E experts (and topk per token) each MLP is one moe "
      "layer";
  op.dim_names = {"layers", "H", "heads", "kv_heads", "D", "I", "V", "L"};
  op.optional_dim_names = {"E", "topk"};
  // E > 0 makes the MLP an moe call of (H, I, E, topk): the dims moe itself refuses are bad input.
  op.dims_problem = [](const Dims& dims) -> std::optional<std::pair<std::string, std::string>> {
    auto value = [&](const char* name) {
      auto it = dims.find(name);
      return it == dims.end() ? std::int64_t{0} : it->second;
    };
    if (value("E") == 0) {
      if (value("topk") == 0) return std::nullopt;
      return std::make_pair(std::string("topk"),
                            "no topk without E (experts: the MLP is dense without them)");
    }
    if (value("topk") == 0) return std::make_pair(std::string("topk"), "experts per token with E");
    return moe::dims_problem(
        {{"H", value("H")}, {"I", value("I")}, {"E", value("E")}, {"topk", value("topk")}});
  };
  op.tensors = [ops](const CaseSpec& spec) { return chain_tensors(*ops, spec); };
  op.shape_problem = [ops](const CaseSpec& spec) -> std::optional<std::string> {
    if (spec.dim("heads") % spec.dim("kv_heads")) return std::string("kv_heads must divide heads");
    if (spec.dim("D") % 2) return std::string("head dim D must be even (rope rotates pairs)");
    for (const chain::Call& call : chain::calls(spec)) {
      const OpDef& sub = ops->at(call.op);
      if (!sub.shape_problem) continue;
      if (auto problem = sub.shape_problem(chain::call_spec(spec, call, "")))
        return call.name + " (" + call.op + "): " + *problem;
    }
    return std::nullopt;
  };
  op.reference_along = [ops](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                             const std::map<std::string, Tensor>& trajectory,
                             const ReferenceRequest& request,
                             std::map<std::string, Tensor>& outputs) {
    chain_reference(*ops, spec, inputs, trajectory, request, outputs);
  };
  op.threshold_of = [ops](const std::string& output) {
    const std::size_t dot = output.rfind('.');
    const std::string call = output.substr(0, dot), op_name = chain::op_of_call(call);
    if (dot == std::string::npos || op_name.empty())
      throw std::logic_error("chain: no call for output " + output);
    return std::make_pair(ops->at(op_name).tolerance_key, output.substr(dot + 1));
  };
  op.logical_rows = [](const CaseSpec& spec) { return attention::sequence_offsets(spec).back(); };
  op.parts = [](const CaseSpec& spec) {
    std::vector<CaseSpec> parts;
    for (const chain::Call& call : chain::calls(spec))
      parts.push_back(chain::call_spec(spec, call, ""));
    return parts;
  };
  op.layout_names = attention_op.layout_names;
  op.layout_names.push_back(padded_in_order);
  op.canonical_layout = attention_op.canonical_layout;
  op.make_layout = [attention_layout = attention_op.make_layout](const std::string& name,
                                                                 const CaseSpec& spec) {
    if (auto layout = in_order_layout(name, spec)) return layout;
    return attention_layout(name, spec);
  };
  op.report_extension =
      ReportExtension{"chain", chain::op_status, chain::failing_op_lines, chain::run_summary};
  registry.add_op(std::move(op));
}

void register_chain(Registry& registry, OpPart part) {
  register_op_part(registry, part, {register_chain_op, nullptr, nullptr, register_chain_impls});
}

namespace chain {
namespace {

bool mentions(const nlohmann::json& entries, const std::string& tensor) {
  return std::any_of(entries.begin(), entries.end(),
                     [&](const nlohmann::json& e) { return e.value("tensor", "") == tensor; });
}

}  // namespace

std::string swapped_op(const std::string& impl_name) {
  const std::size_t plus = impl_name.find('+'), equals = impl_name.find('=');
  if (plus == std::string::npos || equals == std::string::npos || equals < plus) return "";
  return impl_name.substr(plus + 1, equals - plus - 1);
}

nlohmann::json op_status(const nlohmann::json& case_json) {
  if (!case_json.contains("accuracy") || case_json["accuracy"].empty()) return nullptr;
  const nlohmann::json& drift = case_json["drift"];
  const nlohmann::json& nondeterminism = case_json["nondeterminism"];
  nlohmann::json ops = nlohmann::json::array();
  nlohmann::json first = {{"forward", nullptr}, {"backward", nullptr}};
  for (const nlohmann::json& accuracy : case_json["accuracy"]) {
    const std::string tensor = accuracy.at("tensor").get<std::string>();
    const std::string call = tensor.substr(0, tensor.rfind('.'));
    if (ops.empty() || ops.back()["call"] != call) {
      ops.push_back({{"call", call},
                     {"op", op_of_call(call)},
                     {"layer", layer_of(call)},
                     {"phase", call.rfind("bwd.", 0) == 0 ? "backward" : "forward"},
                     {"status", "pass"},
                     {"tensors", nlohmann::json::array()}});
    }
    nlohmann::json& entry = ops.back();
    entry["tensors"].push_back(tensor);
    const std::string status = entry["status"].get<std::string>();
    if (mentions(nondeterminism, tensor)) {
      entry["status"] = "nondeterministic";
    } else if (status == "pass" && mentions(drift, tensor)) {
      entry["status"] = "drift";
    } else if (status == "pass" && !accuracy.value("passed", true)) {
      entry["status"] = "inaccurate";
    }
    if (!accuracy.value("passed", true) && !entry.contains("first_inaccuracy"))
      entry["first_inaccuracy"] = accuracy;  // against the call's own reference and contract row
    if (entry.contains("first_drift") || entry["status"] == "pass" ||
        entry["status"] == "inaccurate")
      continue;
    // The drift metrics of the call's first differing tensor, at its first differing layout.
    for (const nlohmann::json* list : {&nondeterminism, &drift}) {
      for (const nlohmann::json& d : *list) {
        if (d.value("tensor", "") == tensor && !entry.contains("first_drift"))
          entry["first_drift"] = d;
      }
    }
  }
  // Each call is checked on its own inputs, so an inaccurate call is the one that computes wrong.
  for (const nlohmann::json& entry : ops) {
    if (entry["status"] == "pass") continue;
    nlohmann::json& slot = first[entry["phase"].get<std::string>()];
    if (slot.is_null()) slot = entry;
  }
  nlohmann::json result = {{"ops", ops},
                           {"first_failing_forward", first["forward"]},
                           {"first_failing_backward", first["backward"]}};
  const std::string swapped = swapped_op(case_json.value("impl", ""));
  if (!swapped.empty()) {
    // A control swapped in for one op: the first failing op must be that op (forward order, or
    // backward order when the forward holds).
    const nlohmann::json& failing =
        first["forward"].is_null() ? first["backward"] : first["forward"];
    result["swapped_op"] = swapped;
    result["localized"] =
        failing.is_null() ? nlohmann::json(nullptr) : nlohmann::json(failing["op"] == swapped);
  }
  return result;
}

std::vector<std::string> failing_op_lines(const nlohmann::json& status) {
  std::vector<std::string> lines;
  if (status.is_null()) return lines;
  for (const char* phase : {"forward", "backward"}) {
    const nlohmann::json& failing = status[std::string("first_failing_") + phase];
    std::string line = std::string(phase) + ": first failing op ";
    if (failing.is_null()) {
      lines.push_back(line + "none");
      continue;
    }
    line += failing["call"].get<std::string>() + " (" + failing["op"].get<std::string>();
    if (failing["layer"].get<std::int64_t>() >= 0)
      line += ", layer " + std::to_string(failing["layer"].get<std::int64_t>());
    line += ") " + failing["status"].get<std::string>();
    if (failing.contains("first_drift")) {
      const nlohmann::json& d = failing["first_drift"];
      char metrics[160];
      std::snprintf(metrics, sizeof metrics,
                    ": %lld mismatches, max abs %.3g, max rel %.3g, max ulp %llu",
                    static_cast<long long>(d.value("mismatch_count", std::int64_t{0})),
                    d["max_abs_diff"].is_number() ? d["max_abs_diff"].get<double>() : NAN,
                    d["max_rel_diff"].is_number() ? d["max_rel_diff"].get<double>() : NAN,
                    static_cast<unsigned long long>(d.value("max_ulp_distance", std::uint64_t{0})));
      line += " in " + d.value("tensor", "") + ", layout " + d.value("layout", "") + " vs " +
              d.value("reference_layout", "") + metrics;
    } else if (failing.contains("first_inaccuracy")) {
      const nlohmann::json& a = failing["first_inaccuracy"];
      auto number = [&](const char* key) {
        return a[key].is_number() ? a[key].get<double>() : NAN;
      };
      char metrics[200];
      std::snprintf(metrics, sizeof metrics,
                    ": %lld of %lld elements outside atol %.3g + rtol %.3g, max abs error %.3g",
                    static_cast<long long>(a.value("violations", std::int64_t{0})),
                    static_cast<long long>(a.value("compared", std::int64_t{0})), number("atol"),
                    number("rtol"), number("max_abs_error"));
      line += " in " + a.value("tensor", "") + " against its own reference" + metrics;
    }
    lines.push_back(line);
  }
  return lines;
}

std::string run_summary(const nlohmann::json& results) {
  std::ostringstream out;
  std::int64_t localized = 0, swaps = 0;
  std::vector<std::string> elsewhere;
  for (const auto& result : results) {
    if (!result.contains("chain") || result["chain"].is_null()) continue;
    const auto& status = result["chain"];
    if (status.contains("localized")) {
      if (status["localized"].is_null()) continue;
      ++swaps;
      if (status["localized"].get<bool>()) {
        ++localized;
      } else {
        elsewhere.push_back(result["id"].get<std::string>());
      }
      continue;
    }
    if (result["verdict"] == "pass") continue;
    out << "chain " << result["id"].get<std::string>() << " "
        << result["verdict"].get<std::string>() << "\n";
    for (const auto& line : failing_op_lines(status)) out << "  " << line << "\n";
  }
  if (swaps > 0) {
    out << "chain controls: " << localized << "/" << swaps
        << " drifting swaps first fail at the swapped op\n";
    for (const auto& id : elsewhere) out << "  NOT LOCALIZED: " << id << "\n";
  }
  return out.str();
}

}  // namespace chain
}  // namespace bitcheck
