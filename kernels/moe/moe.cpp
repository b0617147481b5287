// moe: one mixture-of-experts MLP layer. Router logits x·routerᵀ in the case dtype, top-k by logit
// plus the skew option's bias (lowest expert index on ties), weights renormalized over the k; each
// chosen expert's SwiGLU MLP w_down·(silu(w_gate·x) * w_up·x); y the weighted sum in rank order.
// Backward: dx per token, and drouter, dw_gate, dw_up, dw_down reduced over tokens. The values the
// layer stores between its GEMMs (gate, up, activation, each expert's output, and their gradients)
// are in the dtype; the FP32 reference rounds them at the same points.
#include "moe/moe.h"

#include <cmath>
#include <map>

#include "common/eigen_view.h"
#include "common/elementwise_math.h"
#include "moe/moe_routing.h"

namespace bitcheck {
namespace moe {

Shape shape_of(const CaseSpec& spec) {
  return {spec.dim("H"), spec.dim("I"), spec.dim("E"), spec.dim("topk"),
          spec.optional_dim("hot_experts")};
}

std::optional<std::pair<std::string, std::string>> dims_problem(const Dims& dims) {
  auto value = [&](const char* name) {
    auto it = dims.find(name);
    return it == dims.end() ? std::int64_t{0} : it->second;
  };
  const std::int64_t experts = value("E"), topk = value("topk");
  for (const char* name : {"H", "I", "E"}) {
    if (value(name) % 8 != 0) {
      return std::make_pair(std::string(name),
                            "a multiple of 8 (the CUDA kernels' GEMM tiles load 8 elements at a "
                            "time), got " +
                                std::to_string(value(name)));
    }
  }
  if (experts > max_experts) {
    return std::make_pair(std::string("E"), "at most " + std::to_string(max_experts) +
                                                " experts (the router's top-k kernel), got " +
                                                std::to_string(experts));
  }
  if (topk > experts || topk > max_topk) {
    return std::make_pair(std::string("topk"), "at most E (" + std::to_string(experts) +
                                                   ") and at most " + std::to_string(max_topk) +
                                                   " experts per token, got " +
                                                   std::to_string(topk));
  }
  if (value("hot_experts") > topk) {
    return std::make_pair(std::string("hot_experts"),
                          "at most topk (" + std::to_string(topk) +
                              ") hot experts, so every token routes to all of them, got " +
                              std::to_string(value("hot_experts")));
  }
  return std::nullopt;
}

std::vector<float> router_bias(const Shape& shape) {
  std::vector<float> bias(static_cast<std::size_t>(shape.experts));
  for (std::int64_t e = 0; e < shape.experts; ++e) {
    bias[static_cast<std::size_t>(e)] = expert_bias(
        static_cast<int>(e), static_cast<int>(shape.experts), static_cast<int>(shape.hot_experts));
  }
  return bias;
}

void route_token(const Shape& shape, DType dtype, const std::vector<float>& bias,
                 const float* dot_products, std::int32_t* ids, float* weights) {
  std::vector<float> logits(bias.size()), keys(bias.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    logits[e] = round_to(dtype, dot_products[e]);
    keys[e] = logits[e] + bias[e];
  }
  route(keys.data(), logits.data(), static_cast<int>(shape.experts), static_cast<int>(shape.topk),
        ids, weights);
}

}  // namespace moe

namespace {

using moe::Shape;
using VectorF = Eigen::VectorXf;

// Expert slabs of a [E, rows, cols] weight as float matrices, decoded once each on first use (a
// forward case touches only the experts its sampled rows chose).
class ExpertMatrices {
 public:
  ExpertMatrices(const Tensor& weights, std::int64_t rows, std::int64_t cols)
      : weights_(weights), rows_(rows), cols_(cols) {}
  const MatrixF& operator[](std::int64_t expert) {
    auto it = decoded_.find(expert);
    if (it != decoded_.end()) return it->second;
    MatrixF slab(rows_, cols_);
    const std::int64_t base = expert * rows_ * cols_;
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t c = 0; c < cols_; ++c) slab(r, c) = weights_.get(base + r * cols_ + c);
    }
    return decoded_.emplace(expert, std::move(slab)).first->second;
  }

 private:
  const Tensor& weights_;
  std::int64_t rows_, cols_;
  std::map<std::int64_t, MatrixF> decoded_;
};

struct Experts {
  ExpertMatrices gate, up, down;
  Experts(const std::map<std::string, Tensor>& inputs, const Shape& s)
      : gate(inputs.at("w_gate"), s.intermediate, s.hidden),
        up(inputs.at("w_up"), s.intermediate, s.hidden),
        down(inputs.at("w_down"), s.hidden, s.intermediate) {}
};

// The routing of each row of x: ids [rows, topk] and weights, from the fp32 logits x · routerᵀ.
struct Routing {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

Routing route_rows(const CaseSpec& spec, const Shape& s, const MatrixF& x, const Tensor& router) {
  const MatrixF logits = x * to_matrix(router).transpose();
  const std::vector<float> bias = moe::router_bias(s);
  Routing routing;
  routing.ids.resize(static_cast<std::size_t>(x.rows() * s.topk));
  routing.weights.resize(routing.ids.size());
  std::vector<float> row(static_cast<std::size_t>(s.experts));
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    for (std::int64_t e = 0; e < s.experts; ++e) row[static_cast<std::size_t>(e)] = logits(r, e);
    const auto at = static_cast<std::size_t>(r * s.topk);
    moe::route_token(s, spec.dtype, bias, row.data(), routing.ids.data() + at,
                     routing.weights.data() + at);
  }
  return routing;
}

// The tokens routed to one expert, in token order, with the rank each gave it.
struct ExpertTokens {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> ranks;
};

std::vector<ExpertTokens> tokens_per_expert(const Shape& s, const Routing& routing,
                                            std::int64_t rows) {
  std::vector<ExpertTokens> lists(static_cast<std::size_t>(s.experts));
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t j = 0; j < s.topk; ++j) {
      const std::int32_t e = routing.ids[static_cast<std::size_t>(t * s.topk + j)];
      lists[static_cast<std::size_t>(e)].tokens.push_back(t);
      lists[static_cast<std::size_t>(e)].ranks.push_back(j);
    }
  }
  return lists;
}

MatrixF gathered(const MatrixF& rows, const std::vector<std::int64_t>& which) {
  MatrixF result(static_cast<Eigen::Index>(which.size()), rows.cols());
  for (std::size_t i = 0; i < which.size(); ++i)
    result.row(static_cast<Eigen::Index>(i)) = rows.row(which[i]);
  return result;
}

// The value the layer stores in the dtype: every GEMM output and every elementwise result that
// feeds a GEMM is rounded to it (moe.h's definition), in the reference as in the impls, so the
// contract bounds the impls' arithmetic, not the dtype's rounding of those intermediates.
MatrixF rounded(MatrixF matrix, DType dtype) {
  for (Eigen::Index i = 0; i < matrix.size(); ++i)
    matrix.data()[i] = round_to(dtype, matrix.data()[i]);
  return matrix;
}

// One expert's forward on its tokens' rows: gate and up, the SwiGLU activation, the expert's
// output.
struct ExpertForward {
  MatrixF gate, up, activation, out;
};

ExpertForward expert_forward(const MatrixF& x, Experts& experts, std::int64_t e, DType dtype) {
  ExpertForward f;
  f.gate = rounded(x * experts.gate[e].transpose(), dtype);
  f.up = rounded(x * experts.up[e].transpose(), dtype);
  f.activation.resize(f.gate.rows(), f.gate.cols());
  for (Eigen::Index i = 0; i < f.gate.size(); ++i) {
    const float in[2] = {f.gate.data()[i], f.up.data()[i]};
    elementwise::forward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f,
                         f.activation.data() + i);
  }
  f.activation = rounded(f.activation, dtype);
  f.out = rounded(f.activation * experts.down[e].transpose(), dtype);
  return f;
}

void reference_forward(const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                       const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
  const Shape s = moe::shape_of(spec);
  const MatrixF x = to_matrix(inputs.at("x"), request.rows);
  const Routing routing = route_rows(spec, s, x, inputs.at("router"));
  Experts experts(inputs, s);
  MatrixF y = MatrixF::Zero(x.rows(), s.hidden);
  MatrixF ids(x.rows(), s.topk), weights(x.rows(), s.topk);
  const std::vector<ExpertTokens> lists = tokens_per_expert(s, routing, x.rows());
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const ExpertTokens& list = lists[static_cast<std::size_t>(e)];
    if (list.tokens.empty()) continue;
    const ExpertForward f = expert_forward(gathered(x, list.tokens), experts, e, spec.dtype);
    for (std::size_t n = 0; n < list.tokens.size(); ++n) {
      const std::int64_t t = list.tokens[n], j = list.ranks[n];
      const float weight = routing.weights[static_cast<std::size_t>(t * s.topk + j)];
      y.row(t) += weight * f.out.row(static_cast<Eigen::Index>(n));
      ids(t, j) = static_cast<float>(e);
      weights(t, j) = weight;
    }
  }
  outputs["y"] = from_matrix(y);
  outputs["topk_ids"] = from_matrix(ids);
  outputs["topk_weights"] = from_matrix(weights);
}

// Backward over every token (the reductions need all of them): each expert's tokens as matrices;
// dx for every token, the reductions for the experts in request.reduction_rows.
void reference_backward(const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                        const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
  const Shape s = moe::shape_of(spec);
  const DType dtype = spec.dtype;
  const MatrixF x = to_matrix(inputs.at("x")), dy = to_matrix(inputs.at("dy"));
  const MatrixF router = to_matrix(inputs.at("router"));
  const Routing routing = route_rows(spec, s, x, inputs.at("router"));
  const std::vector<ExpertTokens> lists = tokens_per_expert(s, routing, x.rows());
  Experts experts(inputs, s);
  std::map<std::int64_t, std::size_t> wanted;  // expert -> row of the reduction outputs
  for (std::int64_t e : request.reduction_rows) wanted.emplace(e, wanted.size());
  const auto wanted_rows = static_cast<Eigen::Index>(wanted.size());
  MatrixF dw_gate = MatrixF::Zero(wanted_rows, s.intermediate * s.hidden);
  MatrixF dw_up = dw_gate, dw_down = MatrixF::Zero(wanted_rows, s.hidden * s.intermediate);
  MatrixF dx = MatrixF::Zero(x.rows(), s.hidden);
  MatrixF weight_grads(x.rows(), s.topk);  // dL/dw_j = dy · o_j
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const ExpertTokens& list = lists[static_cast<std::size_t>(e)];
    if (list.tokens.empty()) continue;
    const MatrixF x_e = gathered(x, list.tokens), dy_e = gathered(dy, list.tokens);
    const ExpertForward f = expert_forward(x_e, experts, e, dtype);
    MatrixF dout = dy_e;
    for (std::size_t n = 0; n < list.tokens.size(); ++n) {
      const auto row = static_cast<Eigen::Index>(n);
      const std::int64_t t = list.tokens[n], j = list.ranks[n];
      weight_grads(t, j) = dy_e.row(row).dot(f.out.row(row));
      dout.row(row) *= routing.weights[static_cast<std::size_t>(t * s.topk + j)];
    }
    dout = rounded(dout, dtype);
    const MatrixF dactivation = rounded(dout * experts.down[e], dtype);
    MatrixF dgate(f.gate.rows(), f.gate.cols()), dup(f.gate.rows(), f.gate.cols());
    for (Eigen::Index i = 0; i < f.gate.size(); ++i) {
      const float in[3] = {f.gate.data()[i], f.up.data()[i], dactivation.data()[i]};
      float grads[2];
      elementwise::backward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f, grads);
      dgate.data()[i] = grads[0];
      dup.data()[i] = grads[1];
    }
    dgate = rounded(dgate, dtype);
    dup = rounded(dup, dtype);
    const MatrixF dx_e = rounded(dgate * experts.gate[e] + dup * experts.up[e], dtype);
    for (std::size_t n = 0; n < list.tokens.size(); ++n)
      dx.row(list.tokens[n]) += dx_e.row(static_cast<Eigen::Index>(n));
    auto slot = wanted.find(e);
    if (slot == wanted.end()) continue;
    const auto r = static_cast<Eigen::Index>(slot->second);
    const MatrixF gate_grad = dgate.transpose() * x_e, up_grad = dup.transpose() * x_e;
    const MatrixF down_grad = dout.transpose() * f.activation;
    dw_gate.row(r) = Eigen::Map<const Eigen::RowVectorXf>(gate_grad.data(), gate_grad.size());
    dw_up.row(r) = Eigen::Map<const Eigen::RowVectorXf>(up_grad.data(), up_grad.size());
    dw_down.row(r) = Eigen::Map<const Eigen::RowVectorXf>(down_grad.data(), down_grad.size());
  }
  // The renormalized softmax's gradient: dz_j = w_j (g_j - sum_i w_i g_i) on the chosen logits,
  // stored in the dtype (the router Linear's output gradient).
  MatrixF dlogits = MatrixF::Zero(x.rows(), s.experts);
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const auto base = static_cast<std::size_t>(t * s.topk);
    float mean = 0.0f;
    for (std::int64_t j = 0; j < s.topk; ++j)
      mean += routing.weights[base + static_cast<std::size_t>(j)] * weight_grads(t, j);
    for (std::int64_t j = 0; j < s.topk; ++j) {
      const std::size_t at = base + static_cast<std::size_t>(j);
      dlogits(t, routing.ids[at]) = routing.weights[at] * (weight_grads(t, j) - mean);
    }
  }
  dlogits = rounded(dlogits, dtype);
  dx += rounded(dlogits * router, dtype);
  const MatrixF router_grad = dlogits.transpose() * x;
  MatrixF drouter(wanted_rows, s.hidden);
  for (const auto& [e, r] : wanted) drouter.row(static_cast<Eigen::Index>(r)) = router_grad.row(e);
  outputs["dx"] = from_matrix(gathered(dx, request.rows));
  outputs["drouter"] = from_matrix(drouter);
  outputs["dw_gate"] = from_matrix(dw_gate);
  outputs["dw_up"] = from_matrix(dw_up);
  outputs["dw_down"] = from_matrix(dw_down);
}

std::vector<TensorDecl> moe_tensors(const CaseSpec& spec) {
  const Shape s = moe::shape_of(spec);
  // Weights scaled by 3/sqrt(fan-in): logits, gate and up pre-activations, and each expert's output
  // about N(0, 1), so SwiGLU works in its nonlinear range and the softmax's weights spread.
  auto weight = [&](const char* name, std::vector<std::int64_t> shape, std::int64_t fan_in) {
    return TensorDecl{name,
                      TensorRole::parameter,
                      spec.dtype,
                      std::move(shape),
                      Generator::uniform,
                      3.0f / std::sqrt(static_cast<float>(fan_in))};
  };
  std::vector<TensorDecl> decls = {
      {"x", TensorRole::row_input, spec.dtype, {s.hidden}},
      weight("router", {s.experts, s.hidden}, s.hidden),
      weight("w_gate", {s.experts, s.intermediate, s.hidden}, s.hidden),
      weight("w_up", {s.experts, s.intermediate, s.hidden}, s.hidden),
      weight("w_down", {s.experts, s.hidden, s.intermediate}, s.intermediate),
  };
  if (spec.pass == Pass::forward) {
    decls.push_back({"y", TensorRole::row_output, spec.dtype, {s.hidden}});
    decls.push_back({"topk_ids", TensorRole::row_output, DType::i32, {s.topk}});
    decls.push_back({"topk_weights", TensorRole::row_output, DType::fp32, {s.topk}});
    return decls;
  }
  // dy scaled by 1/sqrt(H): dL/dw_j = dy · o_j, an H-long sum, stays about N(0, 1/3) at every H,
  // so the router's gradient (and one threshold row for it) does not grow with H.
  decls.push_back({"dy",
                   TensorRole::row_input,
                   spec.dtype,
                   {s.hidden},
                   Generator::uniform,
                   1.0f / std::sqrt(static_cast<float>(s.hidden))});
  decls.push_back({"dx", TensorRole::row_output, spec.dtype, {s.hidden}});
  decls.push_back({"drouter", TensorRole::reduction_output, DType::fp32, {s.experts, s.hidden}});
  decls.push_back({"dw_gate",
                   TensorRole::reduction_output,
                   DType::fp32,
                   {s.experts, s.intermediate, s.hidden}});
  decls.push_back(
      {"dw_up", TensorRole::reduction_output, DType::fp32, {s.experts, s.intermediate, s.hidden}});
  decls.push_back({"dw_down",
                   TensorRole::reduction_output,
                   DType::fp32,
                   {s.experts, s.hidden, s.intermediate}});
  return decls;
}

}  // namespace

void register_moe_op(Registry& registry) {
  OpDef op;
  op.name = "moe";
  op.summary =
      "mixture-of-experts MLP: router logits in the dtype, top-k (lowest index on ties), "
      "renormalized weights, each expert's SwiGLU MLP, y = sum_j w_j o_j in rank order; backward "
      "dx (per row), drouter, dw_gate, dw_up, dw_down (over tokens)";
  op.dim_names = {"H", "I", "E", "topk"};
  op.optional_dim_names = {"hot_experts"};
  op.dims_problem = moe::dims_problem;
  // The dims check again, for cases that did not come from a spec (minimize's shrunk candidates).
  op.shape_problem = [](const CaseSpec& spec) -> std::optional<std::string> {
    auto problem = moe::dims_problem(spec.dims);
    if (!problem) return std::nullopt;
    return problem->first + ": expected " + problem->second;
  };
  op.bench_baseline = "cublaslt-heuristic";
  op.bench_flops = [](const CaseSpec& spec) {
    const Shape s = moe::shape_of(spec);
    const double rows = static_cast<double>(spec.rows);
    const double router = 2.0 * rows * static_cast<double>(s.experts * s.hidden);
    const double experts = 2.0 * rows * static_cast<double>(s.topk) * 3.0 *
                           static_cast<double>(s.intermediate * s.hidden);
    return spec.pass == Pass::forward ? router + experts : 2.0 * (router + experts);
  };
  op.tensors = moe_tensors;
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    if (spec.pass == Pass::forward) {
      reference_forward(spec, inputs, request, outputs);
    } else {
      reference_backward(spec, inputs, request, outputs);
    }
  };
  registry.add_op(std::move(op));
}

void register_moe(Registry& registry, OpPart part) {
  register_op_part(registry, part,
                   {register_moe_op, register_moe_cpu, BITCHECK_CUDA_PART(register_moe_cuda)});
}

}  // namespace bitcheck
