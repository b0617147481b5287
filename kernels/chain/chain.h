// chain: a small decoder stack composed only of bitcheck's ops (embedding -> layers x [rmsnorm, QKV
// matmul, rope, attention, output matmul, residual add, rmsnorm, gate/up matmul, swiglu, down
// matmul (or one moe layer), residual add] -> final rmsnorm -> lm_head -> logprob, then the
// backward in reverse). Its
// calls, the tensor names they produce, and the composition shared by the impls (which call the
// per-op impls of one backend) and the FP32 reference (which calls the per-op references).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/registration.h"
#include "core/device_output.h"
#include "core/op.h"

namespace bitcheck::chain {

using SharedTensor = std::shared_ptr<const Tensor>;
using TensorMap = std::map<std::string, SharedTensor>;

// A chain tensor between calls: a host tensor, or the device output the call that made it left
// where it was made (Batch::device_outputs: the invocation's slots, pads included), read to the
// host once, the first time something asks for it there.
class Value {
 public:
  explicit Value(SharedTensor host);
  Value(DType dtype, std::vector<std::int64_t> shape, std::shared_ptr<DeviceOutput> device);
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  const std::shared_ptr<DeviceOutput>& device() const { return device_; }
  // The host tensor (read from the device the first time).
  const SharedTensor& host() const;

 private:
  DType dtype_;
  std::vector<std::int64_t> shape_;
  std::shared_ptr<DeviceOutput> device_;
  mutable SharedTensor host_;
};
using SharedValue = std::shared_ptr<const Value>;
using ValueMap = std::map<std::string, SharedValue>;
SharedValue host_value(SharedTensor tensor);

// experts > 0 makes each layer's MLP one moe call (E experts of I, topk per token) in place of
// gate/up matmul, swiglu and down matmul.
struct Shape {
  std::int64_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
  std::int64_t experts = 0, topk = 0;
};
Shape shape_of(const CaseSpec& spec);

// One op call of the chain. `name` is "embed", "l<k>.<site>", "final_norm", "lm_head", "logprob",
// and for the backward "bwd." + that; its outputs are the chain tensors "<name>.<op tensor>".
struct Call {
  std::string name;
  std::string op;
  Pass pass = Pass::forward;  // the op's pass (gradient sums in the backward are forward adds)
  std::int64_t layer = -1;    // -1 outside the layers
  Dims dims;                  // the op's dims
};

// The calls of a case in execution order: the forward, then (backward pass) the backward.
std::vector<Call> calls(const CaseSpec& spec);
// The case of one call: the chain case with the call's op, impl, pass and dims.
CaseSpec call_spec(const CaseSpec& chain_spec, const Call& call, const std::string& impl);

// Runs the op calls of a chain. `rows()` is the row count of every row tensor (the invocation's
// slots, or the logical rows for the reference). `run` gets the op's inputs by the op's tensor
// names and returns its row outputs likewise; it also records every output under the chain's
// name for it ("<call>.<tensor>").
// The fewest rows of an invocation whose glue runs on the device (ImplExecutor::glue_on_device):
// below it the host's copies of a few kilobytes beat a device operation's wait for the GPU.
inline constexpr std::int64_t device_glue_min_rows = 128;

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::int64_t rows() const = 0;
  virtual ValueMap run(const Call& call, const CaseSpec& spec, const ValueMap& inputs) = 0;
  // Whether the glue between calls (column slices, concatenations, the stream's conversions) runs
  // where its values are, on their device, instead of on the host.
  virtual bool glue_on_device() const { return false; }
};

// The composition, once for both executors. `inputs` holds the chain's row inputs (ids, target,
// dlogprob), its parameters, and "positions" (i32, one per row: the token's position in its
// sequence). Calls are made in exactly the order of calls(spec).
void compose(const CaseSpec& spec, const ValueMap& inputs, Executor& executor);

// Per-op status of a chain case in execution order, from the case's report JSON (its accuracy list
// holds every output in declaration order, its drift and nondeterminism lists what differed), and
// the first failing op (drift, nondeterministic or inaccurate) in forward order and in backward
// order. Null when the case did not run.
nlohmann::json op_status(const nlohmann::json& case_json);

// One line per phase naming the first failing op of an op_status() (call, op, layer, tensor,
// layout, drift metrics; or the accuracy metrics of an inaccurate call), e.g. "forward: first
// failing op l0.qkv (matmul, layer 0) ...".
std::vector<std::string> failing_op_lines(const nlohmann::json& status);

// The terminal summary over a report's results: the first failing op of each failing invariant
// chain, and whether every control swapped into the chain drifted first at the op it was swapped
// into.
std::string run_summary(const nlohmann::json& results);

// The layer of a call or chain tensor name ("bwd.l1.down.dw" -> 1), -1 outside the layers.
std::int64_t layer_of(const std::string& name);
// The op a chain impl swaps ("cpu-fixed-order+matmul=cpu-split-k-by-rows" -> "matmul"), or empty.
std::string swapped_op(const std::string& impl_name);
// The site of a call name, its part after "bwd." and "l<k>." ("bwd.l1.down" -> "down").
std::string site_of(std::string call_name);
// The op a call name stands for ("l0.qkv" -> "matmul"); empty for an unknown name.
std::string op_of_call(const std::string& call_name);

// The chain at tp = P, one variant per order of the TP impls (chain_tp.cpp): heads split
// (head-parallel attention), qkv and gate/up column-parallel, o_proj and down row-parallel, the
// embedding, LM head and logprob vocab-parallel; the other calls run the base chain's impls.
struct TpChain {
  ImplInfo info;
  std::map<std::string, Impl*> sites;  // the impl of each TP call site ("o_proj", "lm_head", ...)
};
// The TP variants of the backend whose base chain is `base` (an impl per op), each one whose TP
// impls are all registered.
std::vector<TpChain> tp_chains(const Registry& registry, const std::string& backend,
                               const std::map<std::string, Impl*>& base);

}  // namespace bitcheck::chain

namespace bitcheck {
// The chain's impls for every backend registered so far: one composing the backend's invariant
// impls, and one per control of an op in the chain, swapped in for that op alone.
void register_chain_impls(Registry& registry);
// chain's registration: register_chain(), its one line in kernels/manifest.cpp (after the ops it
// composes), and its parts: the OpDef (chain.cpp) and the composed impls (chain_impls.cpp).
void register_chain(Registry& registry, OpPart part);
void register_chain_op(Registry& registry);
}  // namespace bitcheck
