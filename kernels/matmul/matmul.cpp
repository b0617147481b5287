// matmul: Y[M,N] = X[M,K] · W[N,K]^T (the QKV / MLP / LM-head projection). Backward: dX = dY · W
// per row, dW = dY^T · X reduced over tokens (fp32 accumulator).
#include "matmul/matmul.h"

#include <cmath>

#include "common/eigen_view.h"

namespace bitcheck {

void register_matmul_op(Registry& registry) {
  OpDef op;
  op.name = "matmul";
  op.summary = "Y = X·W^T; backward dX = dY·W (per row) and dW = dY^T·X (over tokens)";
  op.dim_names = {"N", "K"};
  op.bench_baseline = "cublaslt-heuristic";
  op.bench_flops = [](const CaseSpec& spec) {
    const double gemm = 2.0 * static_cast<double>(spec.rows) * static_cast<double>(spec.dim("N")) *
                        static_cast<double>(spec.dim("K"));
    return spec.pass == Pass::forward ? gemm : 2.0 * gemm;  // backward: dX and dW
  };
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t n = spec.dim("N"), k = spec.dim("K");
    // Weights scaled by 1/sqrt(K) keep outputs O(1) at every K, so one threshold row fits all K.
    const float weight_scale = 1.0f / std::sqrt(static_cast<float>(k));
    std::vector<TensorDecl> decls = {
        {"x", TensorRole::row_input, spec.dtype, {k}},
        {"w", TensorRole::parameter, spec.dtype, {n, k}, Generator::uniform, weight_scale},
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"y", TensorRole::row_output, spec.dtype, {n}});
    } else {
      decls.push_back({"dy", TensorRole::row_input, spec.dtype, {n}});
      decls.push_back({"dx", TensorRole::row_output, spec.dtype, {k}});
      decls.push_back({"dw", TensorRole::reduction_output, DType::fp32, {n, k}});
    }
    return decls;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    // Wide outputs: only the requested columns (rows of W for y, columns of W for dx), so a
    // 128256 x 4096 weight is never converted whole.
    auto columns_of = [&](const char* name) {
      auto it = request.columns.find(name);
      return it == request.columns.end() ? std::vector<std::int64_t>{} : it->second;
    };
    if (spec.pass == Pass::forward) {
      MatrixF w_rows = to_matrix(inputs.at("w"), columns_of("y"));
      outputs["y"] = from_matrix(to_matrix(inputs.at("x"), request.rows) * w_rows.transpose());
      return;
    }
    outputs["dx"] = from_matrix(to_matrix(inputs.at("dy"), request.rows) *
                                to_matrix_columns(inputs.at("w"), columns_of("dx")));
    // dW rows n = dy[:, n]^T · x for the sampled n: only those columns of dy are decoded (a
    // vocab-sized dy is gigabytes), and the rows come out of one product.
    MatrixF dy_sampled = to_matrix_columns(inputs.at("dy"), request.reduction_rows);
    MatrixF x = to_matrix(inputs.at("x"));
    outputs["dw"] = from_matrix(product_tn(dy_sampled, x));
  };
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_matmul_cpu(registry);
  register_matmul_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_matmul_cuda(registry);
  register_matmul_tp_cuda(registry);
}
#endif
}  // namespace

void register_matmul(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_matmul_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
