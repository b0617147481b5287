// embedding: out[t] = table[id[t]] (a gather of one row per token). Backward: dtable[v] = sum of
// dout[t] over the tokens t with id[t] == v, reduced over tokens into an fp32 accumulator.
#include "embedding/embedding.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/eigen_view.h"
#include "common/vocab_ops.h"

namespace bitcheck {

TensorDecl embedding_table_decl(const CaseSpec& spec) {
  // Scaled by 1/sqrt(H) like every projection weight, so the same table can serve as the tied
  // LM-head weight (lm_head declares this exact tensor: the runner then hands both ops one table).
  const float scale = 1.0f / std::sqrt(static_cast<float>(spec.dim("H")));
  return {"table",
          TensorRole::parameter,
          spec.dtype,
          {spec.dim("V"), spec.dim("H")},
          Generator::uniform,
          scale};
}

std::int32_t checked_token_id(const Batch& batch, std::int64_t slot) {
  const std::int32_t id = batch.in("ids").get_int(slot);
  const std::int64_t vocab = batch.spec->dim("V");
  if (id < 0 || id >= vocab) {
    throw std::out_of_range("embedding: token id " + std::to_string(id) + " at slot " +
                            std::to_string(slot) + " is out of range [0, " + std::to_string(vocab) +
                            ")");
  }
  return id;
}

void register_embedding_op(Registry& registry) {
  OpDef op;
  op.name = "embedding";
  op.summary = "out = table[id] per token; backward dtable[v] = sum of dout over tokens with id v";
  op.dim_names = {"V", "H"};
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t v = spec.dim("V"), h = spec.dim("H");
    // The table takes the case's special values: the forward has no float row input, and its
    // -0 entries show what a TP impl does with the sign of zero.
    TensorDecl table = embedding_table_decl(spec);
    table.takes_special_values = true;
    std::vector<TensorDecl> decls = {
        {"ids", TensorRole::row_input, DType::i32, {1}, Generator::token_id, 1.0f, v},
        table,
    };
    if (spec.pass == Pass::forward) {
      decls.push_back({"out", TensorRole::row_output, spec.dtype, {h}});
    } else {
      decls.push_back({"dout", TensorRole::row_input, spec.dtype, {h}});
      decls.push_back({"dtable", TensorRole::reduction_output, DType::fp32, {v, h}});
    }
    return decls;
  };
  op.shape_problem = [](const CaseSpec& spec) -> std::optional<std::string> {
    if (spec.dim("V") < 1 || spec.dim("H") < 1) return std::string("V and H must be >= 1");
    return std::nullopt;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const Tensor& ids = inputs.at("ids");
    const std::int64_t v = spec.dim("V");
    auto id_of = [&](std::int64_t row) {
      std::int32_t id = ids.get_int(row);
      if (id < 0 || id >= v)
        throw std::out_of_range("embedding reference: token id " + std::to_string(id) +
                                " out of range");
      return static_cast<std::int64_t>(id);
    };
    if (spec.pass == Pass::forward) {
      std::vector<std::int64_t> table_rows;  // decode only the gathered rows of a large table
      for (std::int64_t row : request.rows) table_rows.push_back(id_of(row));
      outputs["out"] = from_matrix(to_matrix(inputs.at("table"), table_rows));
      return;
    }
    MatrixF dout = to_matrix(inputs.at("dout"));
    std::map<std::int64_t, Eigen::Index> wanted;  // vocab row -> reference row
    for (std::size_t i = 0; i < request.reduction_rows.size(); ++i) {
      wanted[request.reduction_rows[i]] = static_cast<Eigen::Index>(i);
    }
    MatrixF dtable =
        MatrixF::Zero(static_cast<Eigen::Index>(request.reduction_rows.size()), dout.cols());
    for (std::int64_t t = 0; t < dout.rows(); ++t) {
      auto found = wanted.find(id_of(t));
      if (found != wanted.end()) dtable.row(found->second) += dout.row(t);
    }
    outputs["dtable"] = from_matrix(dtable);
  };
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_embedding_cpu(registry);
  register_embedding_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_embedding_cuda(registry);
  register_embedding_tp_cuda(registry);
}
#endif
}  // namespace

void register_embedding(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_embedding_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
