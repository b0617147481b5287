// The elementwise family's op table: one op per function (silu, gelu_tanh, gelu_erf, swiglu,
// residual_add, scale, cast), its tensors per pass, shared by the op definitions, the CPU impls and
// the CUDA adapters so all three agree on tensor order and dtypes; and what the CPU and CUDA impls
// share: their identities, switch points and skip reason, and their registration.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/elementwise_math.h"
#include "core/op.h"

namespace bitcheck {

struct ElementwiseOpInfo {
  std::string name;
  elementwise::Op op;
  std::string summary;
  // Ops whose formula has a transcendental get the tail_approx control on top of the downcast one.
  bool has_transcendental;
};

const std::vector<ElementwiseOpInfo>& elementwise_ops();

// Tensors of a case, in the order the formulas of elementwise_math.h read and write them: row
// inputs, then the per-channel parameter (scale only), then row outputs, then the reduction output
// (scale backward: dscale). Every row tensor is one row of H elements.
std::vector<TensorDecl> elementwise_tensors(elementwise::Op op, const CaseSpec& spec);

// The launch paths of an elementwise impl (both backends split the flattened batch the same way,
// elementwise::body_end): "body.vector" over whole groups, "tail.scalar" over the rest, and
// scale's "columns.token-sequential" (dscale over tokens in token order).
std::vector<PathDecl> elementwise_paths(elementwise::Op op);
// The paths one call of `count` elements takes ("body.vector", "tail.scalar" or both).
std::vector<std::string> elementwise_call_paths(elementwise::Variant tail, std::int64_t count);
// Where the paths change with the batch: M rows of H elements put count % granule elements in
// the tail, so they change wherever (M * H) crosses between a whole and a partial last granule.
std::vector<SwitchPoint> elementwise_switch_points(elementwise::Variant tail, std::int64_t width,
                                                   std::int64_t max_rows);

// What a backend calls its elementwise impls and what it says of each: name_prefix + the variant's
// name ("cpu-" + "tail-approx"), and a description per tail variant.
struct ElementwiseBackend {
  std::string backend;  // "cpu" or "cuda"
  std::string name_prefix;
  std::map<elementwise::Variant, std::string> descriptions;
};

// What the CPU and CUDA impls of an elementwise op share: the op, the tail variant run() applies,
// and the switch points and skip reason that follow from them.
class ElementwiseImpl : public Impl {
 public:
  ElementwiseImpl(ImplInfo info, ElementwiseOpInfo op, elementwise::Variant tail);
  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override;
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override;

 protected:
  const ElementwiseOpInfo op_;
  const elementwise::Variant tail_;
};

using MakeElementwiseImpl = std::function<std::unique_ptr<Impl>(
    ImplInfo info, const ElementwiseOpInfo& op, elementwise::Variant tail)>;

// Registers the impls of every op of the family on one backend: fixed-order, tail-approx where the
// op's formula has a transcendental, and tail-round-toward-zero for cast, tail-downcast-bf16 for
// the others.
void register_elementwise_impls(Registry& registry, const ElementwiseBackend& backend,
                                const MakeElementwiseImpl& make);

}  // namespace bitcheck
