// add_rmsnorm: the fused residual add + RMSNorm of a decoder layer. h = dtype(x + residual) (the
// updated residual stream, an output), y = h * rsqrt(mean(h^2) + 1e-6) * weight. Backward takes the
// gradients of both outputs (dy, dh) and gives dx = dresidual = dh + rmsnorm_backward(dy) per row
// and dweight over tokens (fp32 accumulator).
#include "add_rmsnorm/add_rmsnorm.h"

#include "common/eigen_view.h"

namespace bitcheck {

void register_add_rmsnorm_op(Registry& registry) {
  OpDef op;
  op.name = "add_rmsnorm";
  op.summary =
      "h = x + residual (rounded to the dtype), y = rmsnorm(h) * weight; backward dx = dresidual, "
      "dweight";
  op.dim_names = {"H"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t h = spec.dim("H");
    std::vector<TensorDecl> decls = {
        {"x", TensorRole::row_input, spec.dtype, {h}},
        {"residual", TensorRole::row_input, spec.dtype, {h}},
        {"weight", TensorRole::parameter, spec.dtype, {1, h}},
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"y", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"h", TensorRole::row_output, spec.dtype, {h}});
    } else {
      decls.push_back({"dy", TensorRole::row_input, spec.dtype, {h}});
      decls.push_back({"dh", TensorRole::row_input, spec.dtype, {h}});
      decls.push_back({"dx", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"dresidual", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"dweight", TensorRole::reduction_output, DType::fp32, {1, h}});
    }
    return decls;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    constexpr float eps = 1e-6f;
    Eigen::RowVectorXf weight = to_matrix(inputs.at("weight")).row(0);
    // The residual stream is stored in the case dtype: the norm sees the rounded sum.
    auto residual_sum = [&](const std::vector<std::int64_t>& rows) {
      MatrixF sum = to_matrix(inputs.at("x"), rows) + to_matrix(inputs.at("residual"), rows);
      return MatrixF(sum.unaryExpr([&](float v) { return round_to(spec.dtype, v); }));
    };
    auto inverse_rms = [&](const MatrixF& h) {
      return Eigen::VectorXf(((h.array().square().rowwise().mean()) + eps).rsqrt());
    };
    MatrixF h = residual_sum(request.rows);
    Eigen::VectorXf r = inverse_rms(h);
    MatrixF xhat = h.array().colwise() * r.array();
    if (spec.pass == Pass::forward) {
      outputs["y"] = from_matrix(xhat.array().rowwise() * weight.array());
      outputs["h"] = from_matrix(h);
      return;
    }
    MatrixF dy = to_matrix(inputs.at("dy"), request.rows);
    MatrixF g = dy.array().rowwise() * weight.array();
    Eigen::VectorXf projection = (g.array() * xhat.array()).rowwise().mean();
    MatrixF dnorm = (g.array() - xhat.array().colwise() * projection.array()).colwise() * r.array();
    MatrixF dx = to_matrix(inputs.at("dh"), request.rows) + dnorm;
    outputs["dx"] = from_matrix(dx);
    outputs["dresidual"] = from_matrix(dx);
    MatrixF all_h = residual_sum({});
    MatrixF all_xhat = all_h.array().colwise() * inverse_rms(all_h).array();
    MatrixF dweight = (to_matrix(inputs.at("dy")).array() * all_xhat.array()).colwise().sum();
    outputs["dweight"] = from_matrix(dweight);
  };
  registry.add_op(std::move(op));
}

void register_add_rmsnorm(Registry& registry, OpPart part) {
  register_op_part(registry, part,
                   {register_add_rmsnorm_op, register_add_rmsnorm_cpu,
                    BITCHECK_CUDA_PART(register_add_rmsnorm_cuda)});
}

}  // namespace bitcheck
