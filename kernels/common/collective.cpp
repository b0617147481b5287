// The collectives' op definition: one contribution per rank, summed.
#include "common/collective.h"

#include "common/eigen_view.h"

namespace bitcheck {

std::string collective_name(Collective collective) {
  return collective == Collective::all_reduce ? "all_reduce" : "reduce_scatter";
}

void register_collective_op(Registry& registry, Collective collective) {
  OpDef op;
  op.name = collective_name(collective);
  op.summary = collective == Collective::all_reduce
                   ? "y = sum over the tp ranks of each rank's row of x; every rank gets y"
                   : "y = sum over the tp ranks of each rank's row of x; rank r gets the r-th "
                     "part of the message (slots x H), gathered back for the check";
  op.dim_names = {"H"};
  op.has_backward = false;
  op.tp_in_math = true;
  op.bench_baseline = "nccl-default";  // bitcheck bench: every impl against NCCL as it comes
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t h = spec.dim("H");
    TensorDecl x{"x", TensorRole::row_input, spec.dtype, {spec.tp, h}};
    // Each rank's contribution at its own magnitude, as activations of different ranks are: drawn
    // on one grid at one scale, any two add up exactly, so every tree over four ranks would round
    // only once and no order of the ranks' sums could be told apart.
    static constexpr float rank_scales[] = {1.0f, 0.37f, 2.9f, 0.061f, 1.7f, 0.23f, 5.3f, 0.011f};
    for (std::int64_t rank = 0; rank < spec.tp; ++rank)
      x.group_scales.push_back(rank_scales[rank % 8]);
    return std::vector<TensorDecl>{x, {"y", TensorRole::row_output, spec.dtype, {h}}};
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const std::int64_t h = spec.dim("H");
    const MatrixF x = to_matrix(inputs.at("x"), request.rows);  // [rows, tp * h]
    MatrixF y = MatrixF::Zero(x.rows(), h);
    for (std::int64_t rank = 0; rank < spec.tp; ++rank) y += x.middleCols(rank * h, h);
    outputs["y"] = from_matrix(y);
  };
  registry.add_op(std::move(op));
}

}  // namespace bitcheck
