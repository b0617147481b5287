// rmsnorm: y = x / sqrt(mean(x^2) + eps) * weight, per row. Backward: dx per row and dweight
// reduced over tokens (fp32 accumulator).
#include "rmsnorm/rmsnorm.h"

#include "common/eigen_view.h"

namespace bitcheck {

void register_rmsnorm_op(Registry& registry) {
  OpDef op;
  op.name = "rmsnorm";
  op.summary =
      "y = x * rsqrt(mean(x^2) + 1e-6) * weight; backward dx (per row), dweight (over tokens)";
  op.dim_names = {"H"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t h = spec.dim("H");
    std::vector<TensorDecl> decls = {
        {"x", TensorRole::row_input, spec.dtype, {h}},
        {"weight", TensorRole::parameter, spec.dtype, {1, h}},
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"y", TensorRole::row_output, spec.dtype, {h}});
    } else {
      decls.push_back({"dy", TensorRole::row_input, spec.dtype, {h}});
      decls.push_back({"dx", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"dweight", TensorRole::reduction_output, DType::fp32, {1, h}});
    }
    return decls;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    constexpr float eps = 1e-6f;
    Eigen::RowVectorXf weight = to_matrix(inputs.at("weight")).row(0);
    auto normalize = [&](const MatrixF& x) {
      Eigen::VectorXf inverse_rms = ((x.array().square().rowwise().mean()) + eps).rsqrt();
      return MatrixF(x.array().colwise() * inverse_rms.array());
    };
    if (spec.pass == Pass::forward) {
      MatrixF xhat = normalize(to_matrix(inputs.at("x"), request.rows));
      outputs["y"] = from_matrix(xhat.array().rowwise() * weight.array());
      return;
    }
    MatrixF x = to_matrix(inputs.at("x"), request.rows);
    MatrixF dy = to_matrix(inputs.at("dy"), request.rows);
    Eigen::VectorXf inverse_rms = ((x.array().square().rowwise().mean()) + eps).rsqrt();
    MatrixF xhat = x.array().colwise() * inverse_rms.array();
    MatrixF g = dy.array().rowwise() * weight.array();  // dL/dxhat
    Eigen::VectorXf projection = (g.array() * xhat.array()).rowwise().mean();
    MatrixF dx =
        (g.array() - xhat.array().colwise() * projection.array()).colwise() * inverse_rms.array();
    outputs["dx"] = from_matrix(dx);
    MatrixF all_xhat = normalize(to_matrix(inputs.at("x")));
    Eigen::RowVectorXf dweight =
        (to_matrix(inputs.at("dy")).array() * all_xhat.array()).colwise().sum();
    MatrixF dweight_rows(1, dweight.size());
    dweight_rows.row(0) = dweight;
    outputs["dweight"] = from_matrix(dweight_rows);
  };
  registry.add_op(std::move(op));
}

void register_rmsnorm(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_rmsnorm_op, register_rmsnorm_cpu, BITCHECK_CUDA_PART(register_rmsnorm_cuda)});
}

}  // namespace bitcheck
