// CPU impls of the elementwise family. `cpu-fixed-order` applies one formula to every element (and
// sums dscale over tokens in token order). The controls model a vectorized kernel whose scalar tail
// (the partial last 2048-element tile of the flattened physical buffer, elementwise::body_end)
// evaluates differently from its body: which logical elements land in the tail depends on the
// batch, so their bits move with it.
#include <cmath>
#include <memory>

#include "common/token_reduction.h"
#include "elementwise/elementwise.h"
#include "elementwise/elementwise_ops.h"

namespace bitcheck {
namespace {

using elementwise::Variant;

// Writes `value` rounded toward zero (instead of to nearest) into a 16-bit tensor.
void set_toward_zero(Tensor& tensor, std::int64_t index, float value) {
  float nearest = round_to(tensor.dtype(), value);
  if (tensor.dtype() == DType::fp32 || std::isnan(value) ||
      std::fabs(nearest) <= std::fabs(value)) {
    tensor.set(index, value);
    return;
  }
  tensor.set_bits(index, encode_bits(tensor.dtype(), nearest) - 1u);  // one step toward zero
}

class ElementwiseCpu : public ElementwiseImpl {
 public:
  using ElementwiseImpl::ElementwiseImpl;

  void run(Batch& batch) override {
    const std::int64_t h = batch.spec->dim("H");
    std::vector<const Tensor*> inputs;
    std::vector<Tensor*> outputs;
    const Tensor* parameter = nullptr;
    std::string reduction;
    for (const auto& decl : elementwise_tensors(op_.op, *batch.spec)) {
      if (decl.role == TensorRole::row_input) inputs.push_back(&batch.in(decl.name));
      if (decl.role == TensorRole::parameter) parameter = &batch.in(decl.name);
      if (decl.role == TensorRole::row_output) outputs.push_back(&batch.out(decl.name));
      if (decl.role == TensorRole::reduction_output) reduction = decl.name;
    }
    const std::int64_t count = batch.slots() * h;
    const std::int64_t body_end = elementwise::body_end(tail_, count);
    for (const auto& path : elementwise_call_paths(tail_, count)) record_path(path);
    const bool forward = batch.spec->pass == Pass::forward;
    float in[3] = {0, 0, 0}, out[2] = {0, 0};
    for (std::int64_t e = 0; e < count; ++e) {
      const Variant variant = e < body_end ? Variant::exact : tail_;
      for (std::size_t k = 0; k < inputs.size(); ++k) in[k] = inputs[k]->get(e);
      const float scale = parameter ? parameter->get(e % h) : 0.0f;
      if (forward) {
        elementwise::forward(op_.op, variant, in, scale, out);
      } else {
        elementwise::backward(op_.op, variant, in, scale, out);
      }
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        if (variant == Variant::round_toward_zero) {
          set_toward_zero(*outputs[k], e, out[k]);
        } else {
          outputs[k]->set(e, out[k]);
        }
      }
    }
    if (!reduction.empty()) {
      record_path("columns.token-sequential");
      accumulate_dscale(batch, h, batch.out(reduction));
    }
  }

 private:
  // dscale[c] += dy[t, c] * x[t, c] for the real tokens t in slot (= token) order.
  static void accumulate_dscale(const Batch& batch, std::int64_t h, Tensor& dscale) {
    const Tensor& x = batch.in("x");
    const Tensor& dy = batch.in("dy");
    for (std::int64_t c = 0; c < h; ++c) {
      float sum = dscale.get(c);
      for (std::int64_t s : real_slots(batch)) sum += dy.get(s * h + c) * x.get(s * h + c);
      dscale.set(c, sum);
    }
  }
};

}  // namespace

void register_elementwise_cpu(Registry& registry) {
  const ElementwiseBackend cpu = {
      "cpu",
      "cpu-",
      {{Variant::exact,
        "one formula for every element (explicitly rounded fp32 operations); dscale summed over "
        "tokens in token order"},
       {Variant::tail_approx,
        "control: the scalar tail (the partial last 2048-element tile of the flattened batch) "
        "evaluates tanh in bf16 precision, as a packed-bf16 tail does (gelu_erf: the tanh form), "
        "the body the exact fp32 formula"},
       {Variant::downcast_intermediate,
        "control: the scalar tail rounds its key intermediate (sigmoid, tanh, erf, silu(a), the "
        "sum, the scale) to bf16 before finishing in fp32"},
       {Variant::round_toward_zero,
        "control: the scalar tail converts fp32 to the 16-bit dtype by truncation instead of "
        "round-to-nearest-even"}}};
  register_elementwise_impls(registry, cpu,
                             [](ImplInfo info, const ElementwiseOpInfo& op, Variant tail) {
                               return std::make_unique<ElementwiseCpu>(std::move(info), op, tail);
                             });
}

}  // namespace bitcheck
