// The elementwise family's op table: one op per function (silu, gelu_tanh, gelu_erf, swiglu,
// residual_add, scale, cast), its tensors per pass, shared by the op definitions, the CPU impls and
// the CUDA adapters so all three agree on tensor order and dtypes.
#pragma once
#include <string>
#include <vector>

#include "bitcheck/op.h"
#include "common/elementwise_math.h"

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

}  // namespace bitcheck
