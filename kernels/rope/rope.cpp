// rope: rotary position embedding of one token's heads (q or k), NeoX (rotate_half) or GPT-J
// (interleaved) pairing, rotary dim <= head dim (the rest passes through), each row carrying its
// own position (an i32 row input up to 131072). Backward rotates the gradient by -angle.
#include "rope/rope.h"

#include <cmath>

#include "common/eigen_view.h"
#include "rope/rope_math.h"

namespace bitcheck {

void register_rope_op(Registry& registry) {
  OpDef op;
  op.name = "rope";
  op.summary =
      "y = rotate(x, fp32(pos) * inv_freq) per head; style 1 = NeoX pairs (i, i+R/2), 2 = GPT-J "
      "pairs (2i, 2i+1); backward dx = rotate(dy, -angle)";
  op.dim_names = {"heads", "head_dim", "rotary_dim", "style"};
  op.shape_problem = [](const CaseSpec& spec) -> std::optional<std::string> {
    if (spec.dim("rotary_dim") % 2 != 0) return "rotary_dim must be even";
    if (spec.dim("rotary_dim") > spec.dim("head_dim")) return "rotary_dim must not exceed head_dim";
    if (spec.dim("style") != rope::style_neox && spec.dim("style") != rope::style_gptj) {
      return "style must be 1 (NeoX) or 2 (GPT-J)";
    }
    return std::nullopt;
  };
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t width = spec.dim("heads") * spec.dim("head_dim");
    TensorDecl positions{"positions", TensorRole::row_input, DType::i32, {1}, Generator::index,
                         1.0f,        rope::max_position};
    if (spec.pass == Pass::forward) {
      return std::vector<TensorDecl>{{"x", TensorRole::row_input, spec.dtype, {width}},
                                     positions,
                                     {"y", TensorRole::row_output, spec.dtype, {width}}};
    }
    return std::vector<TensorDecl>{{"dy", TensorRole::row_input, spec.dtype, {width}},
                                   positions,
                                   {"dx", TensorRole::row_output, spec.dtype, {width}}};
  };
  // Same fp32 angle as the contract defines (the angle's rounding is part of the op), then sin,
  // cos and the rotation in double.
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const bool backward = spec.pass == Pass::backward;
    const std::int64_t heads = spec.dim("heads"), head_dim = spec.dim("head_dim");
    const std::int64_t rotary_dim = spec.dim("rotary_dim"), style = spec.dim("style");
    MatrixF in = to_matrix(inputs.at(backward ? "dy" : "x"), request.rows);
    MatrixF out = in;
    const Tensor& positions = inputs.at("positions");
    std::vector<float> inverse_frequency = rope::inverse_frequencies(rotary_dim);
    for (Eigen::Index r = 0; r < in.rows(); ++r) {
      std::int32_t position = positions.get_int(request.rows[static_cast<std::size_t>(r)]);
      for (std::int64_t i = 0; i < rotary_dim / 2; ++i) {
        double theta = static_cast<double>(static_cast<float>(position) *
                                           inverse_frequency[static_cast<std::size_t>(i)]);
        double c = std::cos(theta), s = backward ? -std::sin(theta) : std::sin(theta);
        std::int64_t first = 0, second = 0;
        rope::pair_indices(style, rotary_dim, i, first, second);
        for (std::int64_t head = 0; head < heads; ++head) {
          Eigen::Index a = head * head_dim + first, b = head * head_dim + second;
          double va = in(r, a), vb = in(r, b);
          out(r, a) = static_cast<float>(va * c - vb * s);
          out(r, b) = static_cast<float>(vb * c + va * s);
        }
      }
    }
    outputs[backward ? "dx" : "y"] = from_matrix(out);
  };
  registry.add_op(std::move(op));
}

void register_rope(Registry& registry, OpPart part) {
  register_op_part(registry, part,
                   {register_rope_op, register_rope_cpu, BITCHECK_CUDA_PART(register_rope_cuda)});
}

}  // namespace bitcheck
