// logprob: log-softmax over the vocabulary plus a gather of the target token, per row:
// logprob = logits[target] - log(sum_v exp(logits[v])), fp32 output. Backward:
// dlogits = dlogprob * (onehot(target) - softmax(logits)), in the logits dtype.
#include "logprob/logprob.h"

#include <cmath>
#include <stdexcept>

#include "common/vocab_ops.h"

namespace bitcheck {

std::int64_t checked_target(const Tensor& targets, std::int64_t row, std::int64_t vocab,
                            const std::string& what) {
  std::int32_t id = targets.get_int(row);
  if (id < 0 || id >= vocab) {
    throw std::out_of_range(what + ": token id " + std::to_string(id) + " out of range [0, " +
                            std::to_string(vocab) + ")");
  }
  return id;
}

namespace {
float log_sum_exp(const Eigen::RowVectorXf& logits) {
  const float max = logits.maxCoeff();
  return max + std::log((logits.array() - max).exp().sum());
}
}  // namespace

float reference_logprob(const Eigen::RowVectorXf& logits, std::int64_t target) {
  return logits(static_cast<Eigen::Index>(target)) - log_sum_exp(logits);
}

Eigen::RowVectorXf reference_dlogits(const Eigen::RowVectorXf& logits, std::int64_t target,
                                     float dlogprob) {
  Eigen::RowVectorXf dlogits = -dlogprob * (logits.array() - log_sum_exp(logits)).exp().matrix();
  dlogits(static_cast<Eigen::Index>(target)) += dlogprob;
  return dlogits;
}

void register_logprob_op(Registry& registry) {
  OpDef op;
  op.name = "logprob";
  op.summary =
      "logprob = log_softmax(logits)[target] (fp32 out); backward dlogits = dlogprob * (onehot - "
      "softmax)";
  op.dim_names = {"V"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t v = spec.dim("V");
    // Logits in [-4, 4): a softmax with real contrast, not a near-uniform one.
    std::vector<TensorDecl> decls = {
        {"logits", TensorRole::row_input, spec.dtype, {v}, Generator::uniform, 4.0f},
        {"target", TensorRole::row_input, DType::i32, {1}, Generator::token_id, 1.0f, v},
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"logprob", TensorRole::row_output, DType::fp32, {1}});
    } else {
      decls.push_back({"dlogprob", TensorRole::row_input, DType::fp32, {1}});
      decls.push_back({"dlogits", TensorRole::row_output, spec.dtype, {v}});
    }
    return decls;
  };
  op.shape_problem = [](const CaseSpec& spec) -> std::optional<std::string> {
    if (spec.dim("V") < 1) return std::string("V must be >= 1");
    return std::nullopt;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const std::int64_t v = spec.dim("V");
    MatrixF logits = to_matrix(inputs.at("logits"), request.rows);
    const Tensor& targets = inputs.at("target");
    const auto count = static_cast<Eigen::Index>(request.rows.size());
    if (spec.pass == Pass::forward) {
      MatrixF logprob(count, 1);
      for (Eigen::Index i = 0; i < count; ++i) {
        logprob(i, 0) = reference_logprob(
            logits.row(i), checked_target(targets, request.rows[static_cast<std::size_t>(i)], v,
                                          "logprob reference"));
      }
      outputs["logprob"] = from_matrix(logprob);
      return;
    }
    const Tensor& dlogprob = inputs.at("dlogprob");
    MatrixF dlogits(count, v);
    for (Eigen::Index i = 0; i < count; ++i) {
      std::int64_t row = request.rows[static_cast<std::size_t>(i)];
      dlogits.row(i) = reference_dlogits(
          logits.row(i), checked_target(targets, row, v, "logprob reference"), dlogprob.get(row));
    }
    outputs["dlogits"] = from_matrix(dlogits);
  };
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_logprob_cpu(registry);
  register_logprob_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_logprob_cuda(registry);
  register_logprob_tp_cuda(registry);
}
#endif
}  // namespace

void register_logprob(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_logprob_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
