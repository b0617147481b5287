// lm_head_logprob: the LM-head -> logprob handoff as one op: logits = h·tableᵀ rounded to the case
// dtype (where they materialize between the two kernels), then logprob =
// log_softmax(logits)[target] in fp32. Backward: dlogits (case dtype) = dlogprob * (onehot -
// softmax), dh = dlogits·table per row, dtable = dlogitsᵀ·h over tokens (fp32).
#include "lm_head_logprob/lm_head_logprob.h"

#include "common/vocab_ops.h"

namespace bitcheck {
namespace {

// Logits of `rows` (all rows when empty), rounded to the case dtype as the composed impls store
// them.
MatrixF rounded_logits(const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                       const std::vector<std::int64_t>& rows, const MatrixF& table) {
  MatrixF logits = to_matrix(inputs.at("h"), rows) * table.transpose();
  return logits.unaryExpr([&](float value) { return round_to(spec.dtype, value); });
}

}  // namespace

void register_lm_head_logprob_op(Registry& registry) {
  OpDef op;
  op.name = "lm_head_logprob";
  op.summary =
      "logprob = log_softmax(h·tableᵀ)[target] through the dtype-rounded logits; backward dh, "
      "dtable";
  op.dim_names = {"V", "H"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t v = spec.dim("V"), h = spec.dim("H");
    std::vector<TensorDecl> decls = {
        {"h", TensorRole::row_input, spec.dtype, {h}},
        embedding_table_decl(spec),
        {"target", TensorRole::row_input, DType::i32, {1}, Generator::token_id, 1.0f, v},
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"logprob", TensorRole::row_output, DType::fp32, {1}});
    } else {
      decls.push_back({"dlogprob", TensorRole::row_input, DType::fp32, {1}});
      decls.push_back({"dh", TensorRole::row_output, spec.dtype, {h}});
      decls.push_back({"dtable", TensorRole::reduction_output, DType::fp32, {v, h}});
    }
    return decls;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const std::int64_t v = spec.dim("V");
    const Tensor& targets = inputs.at("target");
    MatrixF table = to_matrix(inputs.at("table"));
    if (spec.pass == Pass::forward) {
      MatrixF logits = rounded_logits(spec, inputs, request.rows, table);
      MatrixF logprob(logits.rows(), 1);
      for (Eigen::Index i = 0; i < logits.rows(); ++i) {
        std::int64_t row = request.rows[static_cast<std::size_t>(i)];
        logprob(i, 0) = reference_logprob(
            logits.row(i), checked_target(targets, row, v, "lm_head_logprob reference"));
      }
      outputs["logprob"] = from_matrix(logprob);
      return;
    }
    // dtable needs every token's dlogits, so the logits of all rows.
    const Tensor& dlogprob = inputs.at("dlogprob");
    MatrixF logits = rounded_logits(spec, inputs, {}, table);
    MatrixF dlogits(logits.rows(), v);
    for (Eigen::Index t = 0; t < logits.rows(); ++t) {
      dlogits.row(t) = reference_dlogits(logits.row(t),
                                         checked_target(targets, t, v, "lm_head_logprob reference"),
                                         dlogprob.get(t))
                           .unaryExpr([&](float value) { return round_to(spec.dtype, value); });
    }
    MatrixF dh(static_cast<Eigen::Index>(request.rows.size()), table.cols());
    for (std::size_t i = 0; i < request.rows.size(); ++i) {
      dh.row(static_cast<Eigen::Index>(i)) = dlogits.row(request.rows[i]) * table;
    }
    outputs["dh"] = from_matrix(dh);
    MatrixF h = to_matrix(inputs.at("h"));
    MatrixF dtable(static_cast<Eigen::Index>(request.reduction_rows.size()), h.cols());
    for (std::size_t i = 0; i < request.reduction_rows.size(); ++i) {
      dtable.row(static_cast<Eigen::Index>(i)) =
          dlogits.col(request.reduction_rows[i]).transpose() * h;
    }
    outputs["dtable"] = from_matrix(dtable);
  };
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_lm_head_logprob_cpu(registry);
  register_lm_head_logprob_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_lm_head_logprob_cuda(registry);
  register_lm_head_logprob_tp_cuda(registry);
}
#endif
}  // namespace

void register_lm_head_logprob(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_lm_head_logprob_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
