// CPU impls of moe. `cpu-fixed-order` computes each (token, expert) pair on its own: every dot
// product in index order, never split, the k results summed in rank order, and each expert's
// weight gradients summed over its tokens in token order into the carried accumulator, so nothing
// about the batch (how many tokens an expert got, in what order experts are scheduled) reaches a
// token's arithmetic. The controls reproduce what changes with the tokens per expert: split-K for
// lightly loaded experts, the combine in the order the experts are scheduled (atomics on the output
// dtype), and weight-gradient partials per chunk of an expert's tokens added last chunk first.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "common/elementwise_math.h"
#include "common/token_reduction.h"
#include "moe/moe.h"

namespace bitcheck {
namespace {

using moe::Shape;

// Experts with fewer tokens than this in an invocation get their K sums split into
// split_k_parts partials reduced in the dtype: the small-M bucket of a fused-MoE config table.
constexpr std::int64_t split_k_below_tokens = 4;
constexpr std::int64_t split_k_parts = 4;
// The weight-gradient control's partials: this many consecutive tokens of an expert's list each.
constexpr std::int64_t dw_chunk_tokens = 4;

enum class Kind { fixed_order, split_k_by_load, arrival_order_combine, arrival_order_dw };

// sum_i term(i) for i = 0..length-1 in index order; with parts > 1 the sum is split into that many
// consecutive partials, each rounded to the dtype and added in the dtype (an OUTPUT_TYPE split-K).
template <typename Term>
float ordered_sum(std::int64_t length, std::int64_t parts, DType dtype, Term term) {
  if (parts <= 1) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < length; ++i) sum += term(i);
    return sum;
  }
  float total = 0.0f;
  const std::int64_t part = (length + parts - 1) / parts;
  for (std::int64_t first = 0; first < length; first += part) {
    float partial = 0.0f;
    for (std::int64_t i = first; i < std::min(length, first + part); ++i) partial += term(i);
    total = round_to(dtype, total + round_to(dtype, partial));
  }
  return total;
}

// A tensor's elements as floats, decoded once per content (the runner's input id).
class Decoded {
 public:
  const std::vector<float>& get(const Batch& batch, const std::string& name) {
    const std::uint64_t id = batch.input_ids.at(name);
    auto& [cached_id, values] = cache_[name];
    if (cached_id != id || values.empty()) {
      values = batch.in(name).to_floats();
      cached_id = id;
    }
    return values;
  }

 private:
  std::map<std::string, std::pair<std::uint64_t, std::vector<float>>> cache_;
};

// One (token, expert) pair of an invocation and what its pass computed.
struct Pair {
  std::int64_t token = 0;   // index into the invocation's real tokens
  std::int64_t rank = 0;    // j: the expert's rank among the token's k
  std::int64_t expert = 0;  // e
  float weight = 0.0f;
  std::vector<float> gate, up, activation, out;  // forward, each rounded to the dtype
  std::vector<float> dout, dgate, dup, dx;       // backward, each rounded to the dtype
  float weight_grad = 0.0f;                      // dy · out
};

class MoeCpu : public Impl {
 public:
  MoeCpu(ImplInfo info, Kind kind) : Impl(std::move(info)), kind_(kind) {}

  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (kind_ != Kind::split_k_by_load || max_rows < split_k_below_tokens) return {};
    // The first batch that can put split_k_below_tokens tokens on one expert (every token on a
    // hot expert does).
    return {{split_k_below_tokens, "expert.split-k", "expert.whole"}};
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    s_ = moe::shape_of(spec);
    dtype_ = spec.dtype;
    tokens_ = real_slots(batch);
    route(batch);
    const std::vector<std::int64_t> loads = expert_loads();
    if (spec.pass == Pass::forward) {
      for (Pair& pair : pairs_) expert_forward(batch, pair, loads);
      combine_forward(batch, loads);
      return;
    }
    for (Pair& pair : pairs_) {
      expert_forward(batch, pair, loads);
      expert_backward(batch, pair, loads);
    }
    const std::vector<float> dlogits = router_backward();
    combine_backward(batch, loads, dlogits);
    if (batch.reductions_wanted) accumulate_weight_grads(batch, dlogits);
  }

 private:
  const float* row(const Batch& batch, const char* name, std::int64_t token) {
    return decoded_.get(batch, name).data() + tokens_[static_cast<std::size_t>(token)] * s_.hidden;
  }
  const float* weights(const Batch& batch, const char* name, std::int64_t expert,
                       std::int64_t slab) {
    return decoded_.get(batch, name).data() + expert * slab;
  }
  // One expert's gate and up [I, H] and down [H, I] weights.
  struct ExpertWeights {
    const float *gate, *up, *down;
  };
  ExpertWeights expert_weights(const Batch& batch, std::int64_t expert) {
    const std::int64_t slab = s_.intermediate * s_.hidden;
    return {weights(batch, "w_gate", expert, slab), weights(batch, "w_up", expert, slab),
            weights(batch, "w_down", expert, slab)};
  }

  // Router logits (x · router[e] in index order), routing, and the (token, expert) pairs.
  void route(const Batch& batch) {
    const std::vector<float> bias = moe::router_bias(s_);
    std::vector<float> dots(static_cast<std::size_t>(s_.experts));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s_.topk));
    std::vector<float> weights(ids.size());
    pairs_.clear();
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
      const float* x = row(batch, "x", static_cast<std::int64_t>(t));
      for (std::int64_t e = 0; e < s_.experts; ++e) {
        const float* router = this->weights(batch, "router", e, s_.hidden);
        dots[static_cast<std::size_t>(e)] =
            ordered_sum(s_.hidden, 1, dtype_, [&](std::int64_t h) { return x[h] * router[h]; });
      }
      moe::route_token(s_, dtype_, bias, dots.data(), ids.data(), weights.data());
      for (std::size_t j = 0; j < ids.size(); ++j) {
        Pair pair;
        pair.token = static_cast<std::int64_t>(t);
        pair.rank = static_cast<std::int64_t>(j);
        pair.expert = ids[j];
        pair.weight = weights[j];
        pairs_.push_back(std::move(pair));
      }
    }
  }

  std::vector<std::int64_t> expert_loads() const {
    std::vector<std::int64_t> loads(static_cast<std::size_t>(s_.experts), 0);
    for (const Pair& pair : pairs_) ++loads[static_cast<std::size_t>(pair.expert)];
    return loads;
  }

  // The K sums of an expert's GEMMs: whole, or (the split-K control) split when it has few tokens.
  std::int64_t parts_for(std::int64_t expert, const std::vector<std::int64_t>& loads) const {
    const bool split = kind_ == Kind::split_k_by_load &&
                       loads[static_cast<std::size_t>(expert)] < split_k_below_tokens;
    if (kind_ == Kind::split_k_by_load) record_path(split ? "expert.split-k" : "expert.whole");
    return split ? split_k_parts : 1;
  }

  void expert_forward(const Batch& batch, Pair& pair, const std::vector<std::int64_t>& loads) {
    const std::int64_t hidden = s_.hidden, inter = s_.intermediate, e = pair.expert;
    const std::int64_t parts = parts_for(e, loads);
    const float* x = row(batch, "x", pair.token);
    const ExpertWeights w = expert_weights(batch, e);
    pair.gate.resize(static_cast<std::size_t>(inter));
    pair.up.resize(pair.gate.size());
    pair.activation.resize(pair.gate.size());
    for (std::int64_t i = 0; i < inter; ++i) {
      const float* g = w.gate + i * hidden;
      const float* u = w.up + i * hidden;
      const auto at = static_cast<std::size_t>(i);
      pair.gate[at] = round_to(
          dtype_, ordered_sum(hidden, parts, dtype_, [&](std::int64_t h) { return x[h] * g[h]; }));
      pair.up[at] = round_to(
          dtype_, ordered_sum(hidden, parts, dtype_, [&](std::int64_t h) { return x[h] * u[h]; }));
      float activation = 0.0f;
      const float in[2] = {pair.gate[at], pair.up[at]};
      elementwise::forward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f,
                           &activation);
      pair.activation[at] = round_to(dtype_, activation);
    }
    pair.out.resize(static_cast<std::size_t>(hidden));
    for (std::int64_t h = 0; h < hidden; ++h) {
      const float* d = w.down + h * inter;
      pair.out[static_cast<std::size_t>(h)] =
          round_to(dtype_, ordered_sum(inter, parts, dtype_, [&](std::int64_t i) {
                     return pair.activation[static_cast<std::size_t>(i)] * d[i];
                   }));
    }
  }

  void expert_backward(const Batch& batch, Pair& pair, const std::vector<std::int64_t>& loads) {
    const std::int64_t hidden = s_.hidden, inter = s_.intermediate, e = pair.expert;
    const std::int64_t parts = parts_for(e, loads);
    const float* dy = row(batch, "dy", pair.token);
    const ExpertWeights w = expert_weights(batch, e);
    pair.weight_grad = ordered_sum(hidden, 1, dtype_, [&](std::int64_t h) {
      return dy[h] * pair.out[static_cast<std::size_t>(h)];
    });
    pair.dout.resize(static_cast<std::size_t>(hidden));
    for (std::int64_t h = 0; h < hidden; ++h)
      pair.dout[static_cast<std::size_t>(h)] = round_to(dtype_, pair.weight * dy[h]);
    pair.dgate.resize(static_cast<std::size_t>(inter));
    pair.dup.resize(pair.dgate.size());
    for (std::int64_t i = 0; i < inter; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const float dactivation =
          round_to(dtype_, ordered_sum(hidden, parts, dtype_, [&](std::int64_t h) {
                     return pair.dout[static_cast<std::size_t>(h)] * w.down[h * inter + i];
                   }));
      const float in[3] = {pair.gate[at], pair.up[at], dactivation};
      float grads[2];
      elementwise::backward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f, grads);
      pair.dgate[at] = round_to(dtype_, grads[0]);
      pair.dup[at] = round_to(dtype_, grads[1]);
    }
    // dx_j = [dgate, dup] · [w_gate; w_up]: one sum over 2I, the gate half first.
    pair.dx.resize(static_cast<std::size_t>(hidden));
    for (std::int64_t c = 0; c < hidden; ++c) {
      pair.dx[static_cast<std::size_t>(c)] = round_to(
          dtype_, ordered_sum(2 * inter, parts, dtype_, [&](std::int64_t i) {
            return i < inter ? pair.dgate[static_cast<std::size_t>(i)] * w.gate[i * hidden + c]
                             : pair.dup[static_cast<std::size_t>(i - inter)] *
                                   w.up[(i - inter) * hidden + c];
          }));
    }
  }

  // dlogits [tokens, E], dense (zero for the experts a token did not choose), each rounded to the
  // dtype: dz_j = w_j (g_j - sum_i w_i g_i), the sum in rank order.
  std::vector<float> router_backward() const {
    const auto k = static_cast<std::size_t>(s_.topk);
    std::vector<float> dlogits(tokens_.size() * static_cast<std::size_t>(s_.experts), 0.0f);
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
      float mean = 0.0f;
      for (std::size_t j = 0; j < k; ++j) {
        const Pair& pair = pairs_[t * k + j];
        mean += pair.weight * pair.weight_grad;
      }
      for (std::size_t j = 0; j < k; ++j) {
        const Pair& pair = pairs_[t * k + j];
        dlogits[t * static_cast<std::size_t>(s_.experts) + static_cast<std::size_t>(pair.expert)] =
            round_to(dtype_, pair.weight * (pair.weight_grad - mean));
      }
    }
    return dlogits;
  }

  // The order a token's k results are added in: rank order, or (the combine control) the order of
  // its experts in the schedule, which runs the experts with the most tokens first.
  std::vector<std::size_t> combine_order(std::size_t token,
                                         const std::vector<std::int64_t>& loads) const {
    const auto k = static_cast<std::size_t>(s_.topk);
    std::vector<std::size_t> order(k);
    std::iota(order.begin(), order.end(), token * k);
    if (kind_ != Kind::arrival_order_combine) return order;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const std::int64_t ea = pairs_[a].expert, eb = pairs_[b].expert;
      const std::int64_t la = loads[static_cast<std::size_t>(ea)],
                         lb = loads[static_cast<std::size_t>(eb)];
      return la != lb ? la > lb : ea < eb;
    });
    return order;
  }

  // Adds `terms` (one per pair, in `order`) and `last`: in fp32 with one rounding at the end, or
  // (the combine control) each onto the dtype output as an atomicAdd on it does.
  template <typename Term>
  float combine(const std::vector<std::size_t>& order, Term term, float last) const {
    float sum = 0.0f;
    const bool atomic = kind_ == Kind::arrival_order_combine;
    for (std::size_t at : order)
      sum = atomic ? round_to(dtype_, sum + round_to(dtype_, term(at))) : sum + term(at);
    return round_to(dtype_, sum + last);
  }

  void combine_forward(Batch& batch, const std::vector<std::int64_t>& loads) {
    Tensor& y = batch.out("y");
    Tensor& ids = batch.out("topk_ids");
    Tensor& topk_weights = batch.out("topk_weights");
    const auto k = static_cast<std::size_t>(s_.topk);
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
      const std::int64_t slot = tokens_[t];
      const std::vector<std::size_t> order = combine_order(t, loads);
      for (std::int64_t h = 0; h < s_.hidden; ++h) {
        y.set(slot * s_.hidden + h, combine(
                                        order,
                                        [&](std::size_t at) {
                                          return pairs_[at].weight *
                                                 pairs_[at].out[static_cast<std::size_t>(h)];
                                        },
                                        0.0f));
      }
      for (std::size_t j = 0; j < k; ++j) {
        const Pair& pair = pairs_[t * k + j];
        ids.set_int(slot * s_.topk + static_cast<std::int64_t>(j),
                    static_cast<std::int32_t>(pair.expert));
        topk_weights.set(slot * s_.topk + static_cast<std::int64_t>(j), pair.weight);
      }
    }
  }

  // dx = [sum_j dx_j] + dlogits · router, the router's term (rounded to the dtype) last.
  void combine_backward(Batch& batch, const std::vector<std::int64_t>& loads,
                        const std::vector<float>& dlogits) {
    Tensor& dx = batch.out("dx");
    const float* router = decoded_.get(batch, "router").data();
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
      const std::vector<std::size_t> order = combine_order(t, loads);
      const float* dz = dlogits.data() + t * static_cast<std::size_t>(s_.experts);
      for (std::int64_t c = 0; c < s_.hidden; ++c) {
        const float router_term = round_to(
            dtype_, ordered_sum(s_.experts, 1, dtype_,
                                [&](std::int64_t e) { return dz[e] * router[e * s_.hidden + c]; }));
        dx.set(
            tokens_[t] * s_.hidden + c,
            combine(
                order, [&](std::size_t at) { return pairs_[at].dx[static_cast<std::size_t>(c)]; },
                router_term));
      }
    }
  }

  // The pairs of each expert in token order (its tokens as the grouped GEMM sees them).
  std::vector<std::vector<std::size_t>> pairs_per_expert() const {
    std::vector<std::vector<std::size_t>> lists(static_cast<std::size_t>(s_.experts));
    for (std::size_t at = 0; at < pairs_.size(); ++at)
      lists[static_cast<std::size_t>(pairs_[at].expert)].push_back(at);
    return lists;
  }

  // Adds sum over `pairs` of outer(left(pair), right(pair)) ([rows, cols]) into `accumulator` at
  // `offset`: one pair at a time in token order, or (the dW control) per chunk of dw_chunk_tokens
  // pairs from zero, the chunks added last first, as atomics from CTAs that finish in that order.
  template <typename Left, typename Right>
  void add_outer_products(const std::vector<std::size_t>& pairs, std::int64_t rows,
                          std::int64_t cols, Left left, Right right, Tensor& accumulator,
                          std::int64_t offset) const {
    if (pairs.empty()) return;  // an expert without tokens here adds nothing
    auto add_pair = [&](std::size_t at, std::vector<float>& sum) {
      const float* l = left(pairs_[at]);
      const float* r = right(pairs_[at]);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t c = 0; c < cols; ++c)
          sum[static_cast<std::size_t>(i * cols + c)] += l[i] * r[c];
      }
    };
    std::vector<float> sum(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] = accumulator.get(offset + static_cast<std::int64_t>(i));
    if (kind_ != Kind::arrival_order_dw) {
      for (std::size_t at : pairs) add_pair(at, sum);
    } else {
      const auto chunk = static_cast<std::size_t>(dw_chunk_tokens);
      for (std::size_t first = (pairs.size() + chunk - 1) / chunk * chunk; first > 0;) {
        first -= chunk;
        std::vector<float> partial(sum.size(), 0.0f);
        for (std::size_t i = first; i < std::min(pairs.size(), first + chunk); ++i)
          add_pair(pairs[i], partial);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];
      }
    }
    for (std::size_t i = 0; i < sum.size(); ++i)
      accumulator.set(offset + static_cast<std::int64_t>(i), sum[i]);
  }

  void accumulate_weight_grads(Batch& batch, const std::vector<float>& dlogits) {
    const std::int64_t hidden = s_.hidden, inter = s_.intermediate;
    const std::vector<std::vector<std::size_t>> lists = pairs_per_expert();
    std::vector<const float*> x(tokens_.size());
    for (std::size_t t = 0; t < tokens_.size(); ++t)
      x[t] = row(batch, "x", static_cast<std::int64_t>(t));
    auto x_of = [&](const Pair& p) { return x[static_cast<std::size_t>(p.token)]; };
    for (std::int64_t e = 0; e < s_.experts; ++e) {
      const std::vector<std::size_t>& list = lists[static_cast<std::size_t>(e)];
      add_outer_products(
          list, inter, hidden, [](const Pair& p) { return p.dgate.data(); }, x_of,
          batch.out("dw_gate"), e * inter * hidden);
      add_outer_products(
          list, inter, hidden, [](const Pair& p) { return p.dup.data(); }, x_of, batch.out("dw_up"),
          e * inter * hidden);
      add_outer_products(
          list, hidden, inter, [](const Pair& p) { return p.dout.data(); },
          [](const Pair& p) { return p.activation.data(); }, batch.out("dw_down"),
          e * hidden * inter);
    }
    // The router is a dense Linear: every token adds dlogits[t, e] x[t] to every expert's row
    // (zero where it did not choose e), in token order.
    Tensor& drouter = batch.out("drouter");
    for (std::int64_t e = 0; e < s_.experts; ++e) {
      for (std::int64_t c = 0; c < hidden; ++c) {
        float sum = drouter.get(e * hidden + c);
        for (std::size_t t = 0; t < tokens_.size(); ++t)
          sum += dlogits[t * static_cast<std::size_t>(s_.experts) + static_cast<std::size_t>(e)] *
                 x[t][c];
        drouter.set(e * hidden + c, sum);
      }
    }
  }

  Kind kind_;
  Decoded decoded_;
  Shape s_;
  DType dtype_ = DType::fp32;
  std::vector<std::int64_t> tokens_;  // the invocation's real slots, in slot (token) order
  std::vector<Pair> pairs_;           // token-major: pairs_[t * topk + j]
};

}  // namespace

void register_moe_cpu(Registry& registry) {
  register_impls<MoeCpu, Kind>(
      registry, "moe",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "each (token, expert) pair alone: dot products in index order, never "
                            "split; the k results summed in fp32 in rank order; each expert's dW "
                            "summed over its tokens in token order into the fp32 accumulator"),
        Kind::fixed_order},
       {ImplInfo::control("cpu-split-k-by-load", "cpu",
                          "control: an expert with fewer than 4 tokens in the batch gets its "
                          "GEMMs' K sums split into 4 partials reduced in the dtype, like the "
                          "small-M bucket of a fused-MoE config table")
            .with_paths({PathDecl("expert.split-k", "an expert with fewer than 4 tokens"),
                         PathDecl("expert.whole", "an expert with 4 tokens or more")}),
        Kind::split_k_by_load},
       {ImplInfo::control("cpu-arrival-order-combine", "cpu",
                          "control: each token's k results added onto y (dx) in its dtype in the "
                          "order its experts are scheduled, the most loaded first, as an "
                          "atomicAdd combine does"),
        Kind::arrival_order_combine},
       {ImplInfo::control("cpu-arrival-order-dw", "cpu",
                          "control: each expert's dW from partials of 4 consecutive tokens of its "
                          "list, added last chunk first, as atomicAdd from per-chunk CTAs")
            .drifting_in({Pass::backward}),
        Kind::arrival_order_dw}});
}

}  // namespace bitcheck
