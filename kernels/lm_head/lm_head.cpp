// lm_head: logits[V] = h[H] · tableᵀ, the vocabulary projection with the embedding table as the
// (tied) weight. Backward: dh = dlogits · table per row, dtable = dlogitsᵀ · h over tokens (fp32).
#include "lm_head/lm_head.h"

#include <cmath>

#include "common/vocab_ops.h"

namespace bitcheck {

void register_lm_head_op(Registry& registry) {
  OpDef op;
  op.name = "lm_head";
  op.summary =
      "logits = h·tableᵀ (tied to the embedding table); backward dh = dlogits·table, dtable = "
      "dlogitsᵀ·h";
  op.dim_names = {"V", "H"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t v = spec.dim("V"), h = spec.dim("H");
    std::vector<TensorDecl> decls = {
        {"h", TensorRole::row_input, spec.dtype, {h}},
        embedding_table_decl(spec),
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"logits", TensorRole::row_output, spec.dtype, {v}});
    } else {
      // Upstream gradients scaled by 1/sqrt(V) keep dh O(1) at every vocabulary size.
      const float dlogits_scale = 1.0f / std::sqrt(static_cast<float>(v));
      decls.push_back(
          {"dlogits", TensorRole::row_input, spec.dtype, {v}, Generator::uniform, dlogits_scale});
      decls.push_back({"dh", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"dtable", TensorRole::reduction_output, DType::fp32, {v, h}});
    }
    return decls;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    // Wide outputs: only the requested columns (vocab rows of the table for logits, hidden
    // columns for dh), and only the sampled vocab columns of dlogits for dtable, so a
    // 128256-row table is never decoded whole.
    auto columns_of = [&](const char* name) {
      auto it = request.columns.find(name);
      return it == request.columns.end() ? std::vector<std::int64_t>{} : it->second;
    };
    if (spec.pass == Pass::forward) {
      MatrixF table_rows = to_matrix(inputs.at("table"), columns_of("logits"));
      outputs["logits"] =
          from_matrix(to_matrix(inputs.at("h"), request.rows) * table_rows.transpose());
      return;
    }
    outputs["dh"] = from_matrix(to_matrix(inputs.at("dlogits"), request.rows) *
                                to_matrix_columns(inputs.at("table"), columns_of("dh")));
    MatrixF dlogits_sampled = to_matrix_columns(inputs.at("dlogits"), request.reduction_rows);
    outputs["dtable"] = from_matrix(product_tn(dlogits_sampled, to_matrix(inputs.at("h"))));
  };
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_lm_head_cpu(registry);
  register_lm_head_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_lm_head_cuda(registry);
  register_lm_head_tp_cuda(registry);
}
#endif
}  // namespace

void register_lm_head(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_lm_head_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
