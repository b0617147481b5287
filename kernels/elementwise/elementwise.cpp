// The elementwise family, one op each: silu, gelu_tanh, gelu_erf, swiglu (silu(a) * b),
// residual_add (into an fp32 residual stream), scale (per-channel fp32 vector) and cast (dtype <->
// fp32), forward and backward, with independent FP32 Eigen references.
#include "elementwise/elementwise.h"

#include <cmath>

#include "common/eigen_view.h"
#include "elementwise/elementwise_ops.h"

namespace bitcheck {
namespace {

using elementwise::Op;
using elementwise::Variant;
using Array = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Inputs span a few units so sigmoid, tanh and erf are exercised beyond their linear part.
constexpr float activation_input_scale = 4.0f;

Array sigmoid(const Array& x) {
  return 1.0f / (1.0f + (-x).exp());
}
Array erf_of(const Array& x) {
  return x.unaryExpr([](float v) { return std::erf(v); });
}
Array tanh_of(const Array& x) {
  return x.unaryExpr([](float v) { return std::tanh(v); });
}
Array gelu_tanh_t(const Array& x) {
  return tanh_of(0.7978845608028654f * (x + 0.044715f * x.cube()));
}

MatrixF rows_of(const std::map<std::string, Tensor>& inputs, const std::string& name,
                const ReferenceRequest& request) {
  return to_matrix(inputs.at(name), request.rows);
}

// Forward and per-row backward outputs of one op on the requested rows.
void reference_rows(Op op, Pass pass, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
  auto in = [&](const std::string& name) { return Array(rows_of(inputs, name, request).array()); };
  auto put = [&](const std::string& name, const Array& value) {
    outputs[name] = from_matrix(value.matrix());
  };
  const bool forward = pass == Pass::forward;
  switch (op) {
    case Op::silu: {
      Array x = in("x"), s = sigmoid(x);
      if (forward) return put("y", x * s);
      return put("dx", in("dy") * s * (1.0f + x * (1.0f - s)));
    }
    case Op::gelu_tanh: {
      Array x = in("x"), t = gelu_tanh_t(x);
      if (forward) return put("y", 0.5f * x * (1.0f + t));
      Array du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x.square());
      return put("dx", in("dy") * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t.square()) * du));
    }
    case Op::gelu_erf: {
      Array x = in("x"), cdf = 0.5f * (1.0f + erf_of(x * 0.7071067811865476f));
      if (forward) return put("y", x * cdf);
      return put("dx", in("dy") * (cdf + x * (-0.5f * x.square()).exp() * 0.3989422804014327f));
    }
    case Op::swiglu: {
      Array a = in("a"), b = in("b"), s = sigmoid(a);
      if (forward) return put("y", a * s * b);
      Array dy = in("dy");
      put("da", dy * b * s * (1.0f + a * (1.0f - s)));
      return put("db", dy * a * s);
    }
    case Op::residual_add: {
      if (forward) return put("y", in("x") + in("residual"));
      put("dx", in("dy"));
      return put("dresidual", in("dy"));
    }
    case Op::scale: {
      Eigen::Array<float, 1, Eigen::Dynamic> scale = to_matrix(inputs.at("scale")).row(0).array();
      if (forward) return put("y", in("x").rowwise() * scale);
      return put("dx", in("dy").rowwise() * scale);
    }
    case Op::cast: {
      if (forward) {
        put("y32", in("x"));
        return put("y", in("x32"));
      }
      put("dx", in("dy32"));
      return put("dx32", in("dy"));
    }
  }
}

void register_one(Registry& registry, const ElementwiseOpInfo& info) {
  OpDef def;
  def.name = info.name;
  def.summary = info.summary;
  def.dim_names = {"H"};
  const Op op = info.op;
  def.tensors = [op](const CaseSpec& spec) { return elementwise_tensors(op, spec); };
  def.reference = [op](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                       const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    reference_rows(op, spec.pass, inputs, request, outputs);
    if (op == Op::scale && spec.pass == Pass::backward) {
      // dscale[c] = sum over all tokens of dy[t, c] * x[t, c].
      MatrixF dscale =
          (to_matrix(inputs.at("dy")).array() * to_matrix(inputs.at("x")).array()).colwise().sum();
      outputs["dscale"] = from_matrix(dscale);
    }
  };
  registry.add_op(std::move(def));
}

}  // namespace

std::vector<PathDecl> elementwise_paths(elementwise::Op op) {
  std::vector<PathDecl> paths = {
      PathDecl("body.vector", "the body: whole groups of the flattened batch"),
      PathDecl("tail.scalar", "the tail: the elements after the last whole group")};
  if (op == elementwise::Op::scale)
    paths.emplace_back("columns.token-sequential", "dscale: tokens added in token order");
  return paths;
}

std::vector<std::string> elementwise_call_paths(elementwise::Variant tail, std::int64_t count) {
  std::vector<std::string> paths;
  const std::int64_t body = elementwise::body_end(tail, count);
  if (body > 0) paths.push_back("body.vector");
  if (body < count) paths.push_back("tail.scalar");
  return paths;
}

std::vector<SwitchPoint> elementwise_switch_points(elementwise::Variant tail, std::int64_t width,
                                                   std::int64_t max_rows) {
  return switch_points_of(
      [&](std::int64_t rows) {
        std::string joined;
        for (const auto& path : elementwise_call_paths(tail, rows * width))
          joined += (joined.empty() ? "" : "+") + path;
        return joined;
      },
      max_rows);
}

ElementwiseImpl::ElementwiseImpl(ImplInfo info, ElementwiseOpInfo op, elementwise::Variant tail)
    : Impl(std::move(info)), op_(std::move(op)), tail_(tail) {}

std::vector<SwitchPoint> ElementwiseImpl::switch_points(const CaseSpec& spec,
                                                        std::int64_t max_rows) const {
  return elementwise_switch_points(tail_, spec.dim("H"), max_rows);
}

std::optional<std::string> ElementwiseImpl::skip_reason(const CaseSpec& spec) const {
  if (!supports_dtype(spec.dtype_name)) {
    return "the fp32 -> fp32 cast is exact: there is no rounding whose mode could differ";
  }
  return std::nullopt;
}

void register_elementwise_impls(Registry& registry, const ElementwiseBackend& backend,
                                const MakeElementwiseImpl& make) {
  const std::map<Variant, std::string> names = {
      {Variant::exact, "fixed-order"},
      {Variant::tail_approx, "tail-approx"},
      {Variant::downcast_intermediate, "tail-downcast-bf16"},
      {Variant::round_toward_zero, "tail-round-toward-zero"}};
  for (const auto& op : elementwise_ops()) {
    std::vector<Variant> variants = {Variant::exact};
    if (op.has_transcendental) variants.push_back(Variant::tail_approx);
    variants.push_back(op.op == Op::cast ? Variant::round_toward_zero
                                         : Variant::downcast_intermediate);
    for (Variant variant : variants) {
      const std::string name = backend.name_prefix + names.at(variant);
      const std::string& description = backend.descriptions.at(variant);
      ImplInfo info = variant == Variant::exact
                          ? ImplInfo::invariant(name, backend.backend, description)
                          : ImplInfo::control(name, backend.backend, description);
      info.with_paths(elementwise_paths(op.op));
      // Narrowing fp32 to fp32 rounds nothing: the rounding-mode control has only 16-bit dtypes.
      if (variant == Variant::round_toward_zero) info.with_dtypes({"bf16", "fp16"});
      registry.add_impl(op.name, make(std::move(info), op, variant));
    }
  }
}

const std::vector<ElementwiseOpInfo>& elementwise_ops() {
  static const std::vector<ElementwiseOpInfo> ops = {
      {"silu", Op::silu, "y = x * sigmoid(x); backward dx = dy * silu'(x)", true},
      {"gelu_tanh", Op::gelu_tanh,
       "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); backward dx", true},
      {"gelu_erf", Op::gelu_erf, "y = 0.5 x (1 + erf(x / sqrt 2)); backward dx", true},
      {"swiglu", Op::swiglu, "y = silu(a) * b (a, b: the gate and up rows); backward da, db", true},
      {"residual_add", Op::residual_add,
       "y (fp32 residual stream) = x (case dtype) + residual (fp32); backward dx = dy rounded to "
       "the case dtype, dresidual = dy",
       false},
      {"scale", Op::scale,
       "y = x * scale (per-channel fp32 vector); backward dx = dy * scale, dscale = sum over "
       "tokens of dy * x (fp32)",
       false},
      {"cast", Op::cast,
       "y32 = fp32(x) (case dtype -> fp32, exact) and y = dtype(x32) (fp32 -> case dtype, round to "
       "nearest even); backward dx = dtype(dy32), dx32 = fp32(dy)",
       false},
  };
  return ops;
}

std::vector<TensorDecl> elementwise_tensors(Op op, const CaseSpec& spec) {
  const std::int64_t h = spec.dim("H");
  const DType dt = spec.dtype;
  auto row_in = [&](const std::string& name, DType dtype, float scale = 1.0f) {
    return TensorDecl{name, TensorRole::row_input, dtype, {h}, Generator::uniform, scale};
  };
  auto row_out = [&](const std::string& name, DType dtype) {
    return TensorDecl{name, TensorRole::row_output, dtype, {h}};
  };
  const bool forward = spec.pass == Pass::forward;
  switch (op) {
    case Op::silu:
    case Op::gelu_tanh:
    case Op::gelu_erf:
      if (forward) return {row_in("x", dt, activation_input_scale), row_out("y", dt)};
      return {row_in("x", dt, activation_input_scale), row_in("dy", dt), row_out("dx", dt)};
    case Op::swiglu:
      if (forward)
        return {row_in("a", dt, activation_input_scale), row_in("b", dt), row_out("y", dt)};
      return {row_in("a", dt, activation_input_scale), row_in("b", dt), row_in("dy", dt),
              row_out("da", dt), row_out("db", dt)};
    case Op::residual_add:
      if (forward)
        return {row_in("x", dt), row_in("residual", DType::fp32), row_out("y", DType::fp32)};
      return {row_in("dy", DType::fp32), row_out("dx", dt), row_out("dresidual", DType::fp32)};
    case Op::scale: {
      TensorDecl scale{"scale", TensorRole::parameter, DType::fp32, {1, h}};
      if (forward) return {row_in("x", dt), scale, row_out("y", dt)};
      return {row_in("x", dt), row_in("dy", dt), scale, row_out("dx", dt),
              TensorDecl{"dscale", TensorRole::reduction_output, DType::fp32, {1, h}}};
    }
    case Op::cast:
      if (forward)
        return {row_in("x", dt), row_in("x32", DType::fp32), row_out("y32", DType::fp32),
                row_out("y", dt)};
      return {row_in("dy32", DType::fp32), row_in("dy", dt), row_out("dx", dt),
              row_out("dx32", DType::fp32)};
  }
  return {};
}

void register_elementwise_ops(Registry& registry) {
  for (const auto& info : elementwise_ops()) register_one(registry, info);
}

void register_elementwise(Registry& registry, OpPart part) {
  register_op_part(registry, part,
                   {register_elementwise_ops, register_elementwise_cpu,
                    BITCHECK_CUDA_PART(register_elementwise_cuda)});
}

}  // namespace bitcheck
