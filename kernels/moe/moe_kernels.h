// The moe kernels' launchers (moe_kernels.cu: routing, the pairs' lists, gather, SwiGLU, combine
// and the backward's glue; moe_control_kernels.cu: the controls' atomics and split-K). Plain C++
// header, no CUDA headers. The expert GEMMs themselves are matmul's (fixed_order_gemm.h,
// cublaslt_gemm.h), one call per expert.
//
// A pair is one (token, rank) of the routing, numbered t * topk + j over the invocation's real
// tokens t. Each expert's pairs sit in one contiguous run of the "expert-major" order, in token
// order within the run, the runs wherever the caller's offsets put them (the impls: the most
// loaded expert first): entries[p] is the pair at position p and positions[pair] is its p.
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

// ids [T, topk] (int32) and weights [T, topk] (fp32) from the router logits [T, E] (in `dtype`,
// the router GEMM's output) plus the per-expert selection bias [E]: moe_routing.h's route().
void moe_route(DeviceDType dtype, const void* logits, const float* bias, std::int64_t tokens,
               int experts, int topk, std::int32_t* ids, float* weights, CUstream_st* stream);

// counts[e] = how many of the `pairs` ids are e.
void moe_count_pairs(const std::int32_t* ids, std::int64_t pairs, int experts, std::int32_t* counts,
                     CUstream_st* stream);
// The expert-major order: expert e's pairs at offsets[e] .. offsets[e] + counts[e] - 1 in pair
// (token) order, one block per expert; entries and positions as above.
void moe_place_pairs(const std::int32_t* ids, std::int64_t pairs, int experts,
                     const std::int64_t* offsets, std::int32_t* entries, std::int32_t* positions,
                     CUstream_st* stream);

// out[p] = rows[entries[p] / topk] for p < count: each pair's token row, `width` elements.
void moe_gather_rows(DeviceDType dtype, const void* rows, const std::int32_t* entries, int topk,
                     std::int64_t count, std::int64_t width, void* out, CUstream_st* stream);

// activation[p, i] = dtype(silu(g) * u) with g, u = gate_up[p, i], gate_up[p, I + i].
void moe_swiglu_forward(DeviceDType dtype, const void* gate_up, std::int64_t count,
                        std::int64_t inter, void* activation, CUstream_st* stream);
// dgate_up[p, i] = dtype(da * u * silu'(g)), dgate_up[p, I + i] = dtype(da * silu(g)).
void moe_swiglu_backward(DeviceDType dtype, const void* gate_up, const void* dactivation,
                         std::int64_t count, std::int64_t inter, void* dgate_up,
                         CUstream_st* stream);

// y[t, h] = dtype(sum_j weights[t, j] * out[positions[t, j], h]), j = 0..topk-1 in order, fp32.
void moe_combine(DeviceDType dtype, const void* out, const std::int32_t* positions,
                 const float* weights, std::int64_t tokens, int topk, std::int64_t hidden, void* y,
                 CUstream_st* stream);

// weight_grads[t, j] = dy[t] · out[positions[t, j]] (fp32, a fixed order over h).
void moe_weight_grads(DeviceDType dtype, const void* dy, const void* out,
                      const std::int32_t* positions, std::int64_t tokens, int topk,
                      std::int64_t hidden, float* weight_grads, CUstream_st* stream);
// dout[positions[t, j], h] = dtype(weights[t, j] * dy[t, h]).
void moe_scale_rows(DeviceDType dtype, const void* dy, const float* weights,
                    const std::int32_t* positions, std::int64_t tokens, int topk,
                    std::int64_t hidden, void* dout, CUstream_st* stream);
// dlogits [T, E] in `dtype`, dense: dtype(w_j (g_j - sum_i w_i g_i)) at the chosen experts (the
// sum in rank order), zero elsewhere.
void moe_router_backward(DeviceDType dtype, const std::int32_t* ids, const float* weights,
                         const float* weight_grads, std::int64_t tokens, int topk, int experts,
                         void* dlogits, CUstream_st* stream);
// dx[t, h] = dtype(sum_j dx_pairs[positions[t, j], h] + router_term[t, h]), fp32, j in order.
void moe_combine_backward(DeviceDType dtype, const void* dx_pairs, const std::int32_t* positions,
                          const void* router_term, std::int64_t tokens, int topk,
                          std::int64_t hidden, void* dx, CUstream_st* stream);

// out[b] = in[b]ᵀ for `batches` [rows, cols] matrices (bits copied).
void moe_transpose(DeviceDType dtype, const void* in, std::int64_t batches, std::int64_t rows,
                   std::int64_t cols, void* out, CUstream_st* stream);
// out[e] = [gate[e]; up[e]]: each expert's gate slab, then its up slab (`slab` elements each).
void moe_stack_gate_up(DeviceDType dtype, const void* gate, const void* up, std::int64_t experts,
                       std::int64_t slab, void* out, CUstream_st* stream);

// ---- controls (moe_control_kernels.cu) ----

// out (`dtype`, [T, hidden], zeroed by the caller) += dtype(weight * rows[p]) by atomicAdd on the
// dtype, for the pairs at positions first .. first + count - 1 (one expert's run); weights by pair,
// or nullptr for a weight of one (the backward's dx_j). One launch per expert, in the order the
// caller schedules them: the order a token's results arrive in is the schedule's.
void moe_combine_atomic_control(DeviceDType dtype, const void* rows, const std::int32_t* entries,
                                std::int64_t first, std::int64_t count, const float* weights,
                                int topk, std::int64_t hidden, void* out, CUstream_st* stream);
// out[t, h] = dtype(out[t, h] + term[t, h]): the router's term added after the atomic combine.
void moe_add_rows(DeviceDType dtype, const void* term, std::int64_t count, void* out,
                  CUstream_st* stream);
// dw[n, k] (fp32) += sum over t of dy[t, n] x[t, k], each 32 consecutive rows summed from zero
// into a partial that atomicAdd adds in whatever order the blocks finish.
void moe_dw_atomic_control(DeviceDType dtype, const void* dy, const void* x, float* dw,
                           std::int64_t tokens, std::int64_t n, std::int64_t k,
                           CUstream_st* stream);
// out = in with the columns outside [first, last) zeroed ([rows, cols]).
void moe_mask_columns(DeviceDType dtype, const void* in, std::int64_t rows, std::int64_t cols,
                      std::int64_t first, std::int64_t last, void* out, CUstream_st* stream);
// out[i] = the `parts` partials (each `count` elements, one after the other) added in order in
// the dtype: dtype(dtype(p0 + p1) + p2) ..., an OUTPUT_TYPE split-K reduction.
void moe_sum_partials(DeviceDType dtype, const void* partials, int parts, std::int64_t count,
                      void* out, CUstream_st* stream);

// ---- the experts' streams ----

// A few streams the per-expert GEMMs are spread over, so small experts run side by side: fork()
// makes each wait for the work queued so far on `origin`, join() makes `origin` wait for them.
// Each GEMM is one launch on one stream, so the spread changes no bit.
class ExpertStreams {
 public:
  static constexpr int count = 4;
  ExpertStreams();
  ~ExpertStreams();
  ExpertStreams(const ExpertStreams&) = delete;
  ExpertStreams& operator=(const ExpertStreams&) = delete;
  void fork(CUstream_st* origin);
  void join(CUstream_st* origin);
  CUstream_st* stream(int expert) const { return streams_[expert % count]; }

 private:
  CUstream_st* streams_[count] = {};
  void* events_[count + 1] = {};
};

}  // namespace bitcheck::cuda
