// moe routing as one formula for the FP32 reference, the CPU impls and the CUDA kernels: the skew
// option's hot-expert bias, the rank order of router logits with its tie rule, and the k weights.
// Plain C++ usable from host code and from .cu files (no CUDA headers, no host-library calls).
#pragma once
#include <cmath>

#include "common/elementwise_math.h"

namespace bitcheck::moe {

// What the kernels can tile (the shape checks of moe.cpp): experts E and top-k k per token.
constexpr int max_experts = 1024;
constexpr int max_topk = 32;

// The selection bias the skew option adds to a hot expert's logit (as DeepSeek-V3's correction
// bias: it picks the experts, the weights come from the unbiased logits). Router logits are about
// N(0, 1) (inputs uniform in [-1, 1), router rows scaled by 3/sqrt(H)), so +8 ranks a hot expert
// above every cold one for practically every token: with hot_experts <= k, each token routes to
// all of them and a batch of M tokens loads each with exactly M.
constexpr float hot_expert_bias = 8.0f;

// Whether `expert` is one of the `hot` experts the skew option favours: the middles of `hot` equal
// slices of [0, experts), so they are spread over the expert indices (never just the first ones,
// which the tie rule favours anyway).
BITCHECK_HOST_DEVICE bool is_hot_expert(int expert, int experts, int hot) {
  for (int slice = 0; slice < hot; ++slice) {
    if (expert == ((2 * slice + 1) * experts) / (2 * hot)) return true;
  }
  return false;
}

BITCHECK_HOST_DEVICE float expert_bias(int expert, int experts, int hot) {
  return is_hot_expert(expert, experts, hot) ? hot_expert_bias : 0.0f;
}

// The rank order of logits: the larger first; NaN above every number (as torch.topk); equal
// values (-0 and +0 included, and two NaNs) by the lower expert index. A strict total order, so the
// top k is one set in one order however the comparisons are grouped.
BITCHECK_HOST_DEVICE bool ranks_before(float a, int a_expert, float b, int b_expert) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a != b) return a > b;
  return a_expert < b_expert;
}

// The k weights from the chosen logits in rank order: w_j = exp(z_j - z_0) / sum_i exp(z_i - z_0),
// the sum in rank order. This is the renormalized top-k of softmax(z) (Qwen3-MoE, Mixtral): the
// full softmax's normalizer cancels, so the unchosen logits never enter.
BITCHECK_HOST_DEVICE void topk_weights(const float* chosen_logits, int k, float* weights) {
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    weights[j] = expf(elementwise::sub(chosen_logits[j], chosen_logits[0]));
    sum = elementwise::add(sum, weights[j]);
  }
  for (int j = 0; j < k; ++j) weights[j] = elementwise::div(weights[j], sum);
}

// Top-k of `experts` selection keys (logit plus bias) by ranks_before: the ids in rank order, and
// the weights from the same experts' unbiased logits. One pass per rank over every expert.
BITCHECK_HOST_DEVICE void route(const float* keys, const float* logits, int experts, int k,
                                int* ids, float* weights) {
  float chosen[max_topk];
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (taken) continue;
      if (best < 0 || ranks_before(keys[e], e, keys[best], best)) best = e;
    }
    ids[j] = best;
    chosen[j] = logits[best];
  }
  topk_weights(chosen, k, weights);
}

}  // namespace bitcheck::moe
