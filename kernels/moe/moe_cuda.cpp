// CUDA impls of moe. The routing, the expert-major lists of (token, rank) pairs, the SwiGLU and
// the combine are moe_kernels.cu's; the GEMMs are matmul's, one call per expert on that expert's
// rows in token order, spread over a few streams (moe_gemms.h). fixed-order, cublaslt-pinned and
// the library default (cuBLASLt's heuristic per expert) differ in the GEMMs; the controls add the
// failures that follow the tokens per expert: split-K for an expert with few tokens, the combine by
// atomicAdd in the order experts are scheduled, and dW by atomicAdd of per-chunk partials.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/runtime.h"
#include "moe/moe.h"
#include "moe/moe_gemms.h"
#include "moe/moe_kernels.h"

namespace bitcheck {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceDType;
using cuda_support::device_dtype;
using cuda_support::upload;
using moe::ExpertWeight;
using moe::GemmPath;
using moe::Shape;

enum class Kind {
  fixed_order,
  cublaslt_pinned,
  cublaslt_heuristic,
  split_k_by_load,
  atomic_combine,
  atomic_dw
};

GemmPath expert_gemm_path(Kind kind) {
  switch (kind) {
    case Kind::cublaslt_pinned:
      return GemmPath::cublaslt_pinned;
    case Kind::cublaslt_heuristic:
      return GemmPath::cublaslt_heuristic;
    case Kind::split_k_by_load:
      return GemmPath::split_k_by_load;
    default:
      return GemmPath::fixed_order;
  }
}

// The router's GEMMs: the impl's own cuBLASLt path, else the fixed order (the split-K control
// models the experts' grouped GEMM, not the router's).
GemmPath router_gemm_path(Kind kind) {
  const GemmPath experts = expert_gemm_path(kind);
  return experts == GemmPath::split_k_by_load ? GemmPath::fixed_order : experts;
}

std::size_t element_bytes(DType dtype) {
  return dtype_size(dtype);
}

void* at_row(const DeviceBuffer& buffer, std::int64_t row, std::int64_t width,
             std::size_t element) {
  return static_cast<char*>(buffer.get()) + row * width * static_cast<std::int64_t>(element);
}

// The layer's weights on the device, shared by every CUDA impl of moe and kept across
// invocations and cases while the runner's parameters (by input id) stay the same: the router
// [E, H], gate and up stacked per expert [E, 2I, H], down [E, H, I], the selection bias, and the
// transposes the fixed-order input gradients read. The bias comes from the shape's hot_experts,
// not from the inputs (cases of one seed and H, I, E share their parameters whatever their skew),
// so it is part of the key.
struct DeviceWeights {
  std::vector<std::uint64_t> ids;
  std::int64_t hot_experts = 0;
  bool transposed = false;
  DeviceBuffer router, gate_up, down, bias, router_t, gate_up_t, down_t;
  ExpertWeight router_w, gate_up_w, down_w;
};

void place_weights(const Shape& s, DType dtype, bool transposed, DeviceBuffer router,
                   const DeviceBuffer& gate, const DeviceBuffer& up, DeviceBuffer down,
                   DeviceWeights& w) {
  const DeviceDType type = device_dtype(dtype);
  const std::size_t element = element_bytes(dtype);
  const std::int64_t e = s.experts, h = s.hidden, i = s.intermediate;
  w.router = std::move(router);
  w.down = std::move(down);
  w.gate_up = DeviceBuffer(static_cast<std::size_t>(2 * e * i * h) * element);
  cuda::moe_stack_gate_up(type, gate.get(), up.get(), e, i * h, w.gate_up.get(), nullptr);
  w.bias = upload(moe::router_bias(s));
  w.transposed = transposed;
  if (transposed) {
    w.router_t = DeviceBuffer(w.router.bytes());
    w.gate_up_t = DeviceBuffer(w.gate_up.bytes());
    w.down_t = DeviceBuffer(w.down.bytes());
    cuda::moe_transpose(type, w.router.get(), 1, e, h, w.router_t.get(), nullptr);
    cuda::moe_transpose(type, w.gate_up.get(), e, 2 * i, h, w.gate_up_t.get(), nullptr);
    cuda::moe_transpose(type, w.down.get(), e, h, i, w.down_t.get(), nullptr);
  }
  w.router_w = {w.router.get(), w.router_t.get(), e, h, element};
  w.gate_up_w = {w.gate_up.get(), w.gate_up_t.get(), 2 * i, h, element};
  w.down_w = {w.down.get(), w.down_t.get(), h, i, element};
  cuda::synchronize();  // the staging buffers of gate and up are freed after this
}

class WeightCache {
 public:
  const DeviceWeights& get(const Batch& batch, const Shape& s, bool transposed) {
    std::vector<std::uint64_t> ids;
    for (const char* name : {"router", "w_gate", "w_up", "w_down"})
      ids.push_back(batch.input_ids.at(name));
    if (weights_ && weights_->ids == ids && weights_->hot_experts == s.hot_experts &&
        (weights_->transposed || !transposed))
      return *weights_;
    weights_.reset();  // free the old copies first
    auto fresh = std::make_unique<DeviceWeights>();
    fresh->ids = ids;
    fresh->hot_experts = s.hot_experts;
    place_weights(s, batch.spec->dtype, transposed, upload(batch.in("router")),
                  upload(batch.in("w_gate")), upload(batch.in("w_up")), upload(batch.in("w_down")),
                  *fresh);
    weights_ = std::move(fresh);
    return *weights_;
  }

 private:
  std::unique_ptr<DeviceWeights> weights_;
};

// The experts in the order a load-balanced schedule runs them: the most pairs first, ties by
// index.
std::vector<std::int64_t> schedule(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return counts[static_cast<std::size_t>(a)] > counts[static_cast<std::size_t>(b)];
  });
  return order;
}

// Device memory of one layer call over `tokens` tokens (P = tokens * topk pairs).
struct LayerBuffers {
  // routing
  DeviceBuffer logits, ids, weights, counts, offsets, entries, positions;
  std::vector<std::int64_t> first, count;  // each expert's run of pairs (host)
  std::vector<std::int64_t> schedule;      // the experts, most pairs first
  // forward, expert-major [P, ...]
  DeviceBuffer rows, gate_up, activation, out, y;
  // backward
  DeviceBuffer dy, weight_grads, dout, dactivation, dgate_up, dx_pairs, dlogits, router_term, dx;
};

DeviceBuffer sized(std::int64_t elements, std::size_t element) {
  return DeviceBuffer(std::max<std::size_t>(static_cast<std::size_t>(elements) * element, 16));
}

// Makes `buffer` hold at least `elements`, keeping it when it already does (a benchmark's calls
// reuse one set of buffers, so no allocation is timed).
void reserve(DeviceBuffer& buffer, std::int64_t elements, std::size_t element) {
  if (buffer.bytes() < static_cast<std::size_t>(elements) * element)
    buffer = sized(elements, element);
}

// The dW accumulators of a layout, on the device from its first invocation to its last.
struct WeightGradState {
  DeviceBuffer drouter, dw_gate_up, dw_down;
};

// An invocation of pads only, its row outputs left on the device: every row a pad (0xFF bytes).
void hand_over_pads(Batch& batch, const CaseSpec& spec, const Shape& s) {
  const std::vector<std::int32_t> none;
  const DeviceBuffer nothing(16);
  const auto hidden_bytes = static_cast<std::size_t>(s.hidden) * element_bytes(spec.dtype),
             topk_bytes = static_cast<std::size_t>(s.topk) * sizeof(std::int32_t);
  if (spec.pass == Pass::forward) {
    DeviceBuffer y = cuda_support::rows_at_slots(nothing, none, batch.slots(), hidden_bytes),
                 ids = cuda_support::rows_at_slots(nothing, none, batch.slots(), topk_bytes),
                 weights = cuda_support::rows_at_slots(nothing, none, batch.slots(), topk_bytes);
    cuda_support::hand_over_rows_all(batch,
                                     {{"y", &y}, {"topk_ids", &ids}, {"topk_weights", &weights}});
    return;
  }
  DeviceBuffer dx = cuda_support::rows_at_slots(nothing, none, batch.slots(), hidden_bytes);
  cuda_support::hand_over_rows(batch, "dx", dx);
}

class CudaMoe : public Impl {
 public:
  struct Variant {
    Kind kind;
    std::shared_ptr<WeightCache> weights;
  };
  CudaMoe(ImplInfo info, Variant variant)
      : Impl(std::move(info.reading_row_inputs_on_device())),
        kind_(variant.kind),
        weights_(std::move(variant.weights)),
        expert_gemms_(moe::make_gemms(expert_gemm_path(kind_))),
        router_gemms_(moe::make_gemms(router_gemm_path(kind_))) {}

  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    const Shape s = moe::shape_of(spec);
    // A hot expert holds every token of the batch, so an expert's load reaches each value of M.
    return moe::gemm_switch_points(expert_gemm_path(kind_), spec,
                                   {{2 * s.intermediate, s.hidden}, {s.hidden, s.intermediate}},
                                   max_rows);
  }

  std::size_t device_workspace_bytes(const CaseSpec& spec) const override {
    const Shape s = moe::shape_of(spec);
    const std::size_t element = element_bytes(spec.dtype);
    const auto pairs = static_cast<std::size_t>(spec.rows * s.topk);
    const auto tokens = static_cast<std::size_t>(spec.rows);
    const auto hidden = static_cast<std::size_t>(s.hidden);
    const auto inter = static_cast<std::size_t>(s.intermediate);
    const auto experts = static_cast<std::size_t>(s.experts);
    std::size_t bytes = pairs * (2 * hidden + 3 * inter) * element + pairs * 16 +
                        tokens * (experts + 2 * hidden) * element;
    if (spec.pass == Pass::backward)
      bytes +=
          pairs * (2 * hidden + 3 * inter) * element + tokens * (experts + 3 * hidden) * element;
    if (expert_gemms_->needs_transposed())
      bytes += experts * (3 * inter * hidden + hidden) * element;
    return bytes + (std::size_t(32) << 20) * (cuda::ExpertStreams::count + 1);
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const Shape s = moe::shape_of(spec);
    const std::vector<std::int32_t> slots = cuda_support::real_slot_list(batch);
    const auto tokens = static_cast<std::int64_t>(slots.size());
    if (tokens == 0) {  // pads only: nothing to compute, the row outputs pads (and handed over)
      if (batch.rows_stay_on_device) hand_over_pads(batch, spec, s);
      return;
    }
    expert_gemms_->set_case(spec.dtype, &batch);
    router_gemms_->set_case(spec.dtype, &batch);
    record_config(batch);
    const DeviceWeights& w = weights_->get(batch, s, expert_gemms_->needs_transposed());
    const DeviceBuffer x = cuda_support::packed_input_rows(batch, "x", slots);
    LayerBuffers layer;
    forward_experts(s, spec.dtype, w, x.get(), tokens, layer);
    if (spec.pass == Pass::forward) {
      combine(s, spec.dtype, tokens, layer);
      // The tokens' rows at their slots, left on the device or brought back behind one wait.
      const auto m = batch.slots();
      const auto hidden_bytes = static_cast<std::size_t>(s.hidden) * element_bytes(spec.dtype),
                 topk_bytes = static_cast<std::size_t>(s.topk) * sizeof(std::int32_t);
      DeviceBuffer y = cuda_support::rows_at_slots(layer.y, slots, m, hidden_bytes),
                   ids = cuda_support::rows_at_slots(layer.ids, slots, m, topk_bytes),
                   weights = cuda_support::rows_at_slots(layer.weights, slots, m, topk_bytes);
      cuda_support::hand_over_rows_all(batch,
                                       {{"y", &y}, {"topk_ids", &ids}, {"topk_weights", &weights}});
    } else {
      layer.dy = cuda_support::packed_input_rows(batch, "dy", slots);
      backward(s, spec.dtype, w, tokens, layer);
      DeviceBuffer dx = cuda_support::rows_at_slots(
          layer.dx, slots, batch.slots(),
          static_cast<std::size_t>(s.hidden) * element_bytes(spec.dtype));
      cuda_support::hand_over_rows(batch, "dx", dx);
      if (batch.reductions_wanted) accumulate_weight_grads(batch, s, x.get(), tokens, layer);
    }
    cuda::synchronize();
    expert_gemms_->release_scratch();
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override;

 private:
  cuda::ExpertStreams& streams() {
    if (!streams_) streams_ = std::make_unique<cuda::ExpertStreams>();
    return *streams_;
  }

  // call(expert, first pair, pairs, stream) for each expert with pairs in the schedule's order,
  // spread over the streams.
  template <typename Call>
  void for_each_expert(const LayerBuffers& layer, Call&& call) {
    streams().fork(nullptr);
    int launched = 0;
    for (std::int64_t e : layer.schedule) {
      const auto at = static_cast<std::size_t>(e);
      if (layer.count[at] == 0) break;  // the rest have none either
      call(e, layer.first[at], layer.count[at], streams().stream(launched++));
    }
    streams().join(nullptr);
  }

  void record_config(Batch& batch) const {
    if (!expert_gemms_->needs_transposed()) return;  // cuBLASLt records its configurations
    batch.impl_config = nlohmann::json::object();
    batch.impl_config["expert_gemm"] = moe::fixed_order_expert_gemm(batch.spec->dtype);
    batch.impl_config["expert_streams"] = cuda::ExpertStreams::count;
  }

  // Router logits, top-k, and each expert's run of pairs in token order, the runs laid out in
  // the schedule's order (the most loaded expert first, as a load-balanced grouped GEMM takes
  // them): where an expert's rows sit, and when its GEMM runs, follow the batch; what a row's
  // arithmetic is does not.
  void route(const Shape& s, DType dtype, const DeviceWeights& w, const void* x,
             std::int64_t tokens, LayerBuffers& layer) {
    const DeviceDType type = device_dtype(dtype);
    const std::int64_t pairs = tokens * s.topk;
    reserve(layer.logits, tokens * s.experts, element_bytes(dtype));
    reserve(layer.ids, pairs, 4);
    reserve(layer.weights, pairs, 4);
    router_gemms_->forward(x, w.router_w, 0, layer.logits.get(), tokens, nullptr);
    cuda::moe_route(type, layer.logits.get(), w.bias.as<float>(), tokens,
                    static_cast<int>(s.experts), static_cast<int>(s.topk),
                    layer.ids.as<std::int32_t>(), layer.weights.as<float>(), nullptr);
    reserve(layer.counts, s.experts, 4);
    cuda::moe_count_pairs(layer.ids.as<std::int32_t>(), pairs, static_cast<int>(s.experts),
                          layer.counts.as<std::int32_t>(), nullptr);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(s.experts));
    layer.counts.download(counts.data(), counts.size() * sizeof(std::int32_t));
    layer.count.assign(counts.begin(), counts.end());
    layer.schedule = schedule(layer.count);
    layer.first.assign(counts.size(), 0);
    std::int64_t next = 0;
    for (std::int64_t e : layer.schedule) {
      layer.first[static_cast<std::size_t>(e)] = next;
      next += layer.count[static_cast<std::size_t>(e)];
    }
    reserve(layer.offsets, s.experts, sizeof(std::int64_t));
    layer.offsets.upload(layer.first.data(), layer.first.size() * sizeof(std::int64_t));
    reserve(layer.entries, pairs, 4);
    reserve(layer.positions, pairs, 4);
    cuda::moe_place_pairs(layer.ids.as<std::int32_t>(), pairs, static_cast<int>(s.experts),
                          layer.offsets.as<std::int64_t>(), layer.entries.as<std::int32_t>(),
                          layer.positions.as<std::int32_t>(), nullptr);
  }

  // Routing, then each pair's token row, gate and up, activation and expert output.
  void forward_experts(const Shape& s, DType dtype, const DeviceWeights& w, const void* x,
                       std::int64_t tokens, LayerBuffers& layer) {
    route(s, dtype, w, x, tokens, layer);
    const DeviceDType type = device_dtype(dtype);
    const std::size_t element = element_bytes(dtype);
    const std::int64_t pairs = tokens * s.topk, hidden = s.hidden, inter = s.intermediate;
    reserve(layer.rows, pairs * hidden, element);
    reserve(layer.gate_up, pairs * 2 * inter, element);
    reserve(layer.activation, pairs * inter, element);
    reserve(layer.out, pairs * hidden, element);
    cuda::moe_gather_rows(type, x, layer.entries.as<std::int32_t>(), static_cast<int>(s.topk),
                          pairs, hidden, layer.rows.get(), nullptr);
    for_each_expert(
        layer, [&](std::int64_t e, std::int64_t first, std::int64_t count, CUstream_st* stream) {
          expert_gemms_->forward(at_row(layer.rows, first, hidden, element), w.gate_up_w, e,
                                 at_row(layer.gate_up, first, 2 * inter, element), count, stream);
        });
    cuda::moe_swiglu_forward(type, layer.gate_up.get(), pairs, inter, layer.activation.get(),
                             nullptr);
    for_each_expert(
        layer, [&](std::int64_t e, std::int64_t first, std::int64_t count, CUstream_st* stream) {
          expert_gemms_->forward(at_row(layer.activation, first, inter, element), w.down_w, e,
                                 at_row(layer.out, first, hidden, element), count, stream);
        });
  }

  // The atomic combine (the control): `out` zeroed, then each expert's rows (weighted, when
  // `weights`) added by atomicAdd, one launch per expert in the schedule's order.
  void combine_atomic(DType dtype, const Shape& s, const LayerBuffers& layer, const void* rows,
                      const float* weights, DeviceBuffer& out) {
    record_path("combine.atomic-by-schedule");
    out.fill_bytes(0);
    for (std::int64_t e : layer.schedule) {
      const auto at = static_cast<std::size_t>(e);
      cuda::moe_combine_atomic_control(device_dtype(dtype), rows, layer.entries.as<std::int32_t>(),
                                       layer.first[at], layer.count[at], weights,
                                       static_cast<int>(s.topk), s.hidden, out.get(), nullptr);
    }
  }

  void combine(const Shape& s, DType dtype, std::int64_t tokens, LayerBuffers& layer) {
    reserve(layer.y, tokens * s.hidden, element_bytes(dtype));
    if (kind_ == Kind::atomic_combine) {
      combine_atomic(dtype, s, layer, layer.out.get(), layer.weights.as<float>(), layer.y);
      return;
    }
    cuda::moe_combine(device_dtype(dtype), layer.out.get(), layer.positions.as<std::int32_t>(),
                      layer.weights.as<float>(), tokens, static_cast<int>(s.topk), s.hidden,
                      layer.y.get(), nullptr);
  }

  // dx: the router weights' gradients, each expert's input gradients through down, SwiGLU and
  // gate/up, the logits' gradient through the router, and the combine of them all.
  void backward(const Shape& s, DType dtype, const DeviceWeights& w, std::int64_t tokens,
                LayerBuffers& layer) {
    const DeviceDType type = device_dtype(dtype);
    const std::size_t element = element_bytes(dtype);
    const std::int64_t pairs = tokens * s.topk, hidden = s.hidden, inter = s.intermediate;
    const int topk = static_cast<int>(s.topk);
    const auto* positions = layer.positions.as<std::int32_t>();
    reserve(layer.weight_grads, pairs, 4);
    reserve(layer.dout, pairs * hidden, element);
    reserve(layer.dactivation, pairs * inter, element);
    reserve(layer.dgate_up, pairs * 2 * inter, element);
    reserve(layer.dx_pairs, pairs * hidden, element);
    reserve(layer.dlogits, tokens * s.experts, element);
    reserve(layer.router_term, tokens * hidden, element);
    reserve(layer.dx, tokens * hidden, element);
    cuda::moe_weight_grads(type, layer.dy.get(), layer.out.get(), positions, tokens, topk, hidden,
                           layer.weight_grads.as<float>(), nullptr);
    cuda::moe_scale_rows(type, layer.dy.get(), layer.weights.as<float>(), positions, tokens, topk,
                         hidden, layer.dout.get(), nullptr);
    for_each_expert(layer, [&](std::int64_t e, std::int64_t first, std::int64_t count,
                               CUstream_st* stream) {
      expert_gemms_->input_grad(at_row(layer.dout, first, hidden, element), w.down_w, e,
                                at_row(layer.dactivation, first, inter, element), count, stream);
    });
    cuda::moe_swiglu_backward(type, layer.gate_up.get(), layer.dactivation.get(), pairs, inter,
                              layer.dgate_up.get(), nullptr);
    for_each_expert(layer, [&](std::int64_t e, std::int64_t first, std::int64_t count,
                               CUstream_st* stream) {
      expert_gemms_->input_grad(at_row(layer.dgate_up, first, 2 * inter, element), w.gate_up_w, e,
                                at_row(layer.dx_pairs, first, hidden, element), count, stream);
    });
    cuda::moe_router_backward(type, layer.ids.as<std::int32_t>(), layer.weights.as<float>(),
                              layer.weight_grads.as<float>(), tokens, topk,
                              static_cast<int>(s.experts), layer.dlogits.get(), nullptr);
    router_gemms_->input_grad(layer.dlogits.get(), w.router_w, 0, layer.router_term.get(), tokens,
                              nullptr);
    if (kind_ == Kind::atomic_combine) {
      combine_atomic(dtype, s, layer, layer.dx_pairs.get(), nullptr, layer.dx);
      cuda::moe_add_rows(type, layer.router_term.get(), tokens * hidden, layer.dx.get(), nullptr);
      return;
    }
    cuda::moe_combine_backward(type, layer.dx_pairs.get(), positions, layer.router_term.get(),
                               tokens, topk, hidden, layer.dx.get(), nullptr);
  }

  // dW of every expert over its rows in token order (the atomic control: per-chunk partials),
  // and the router's over every token, into the accumulators the layout carries on the device;
  // downloaded after its last invocation.
  void accumulate_weight_grads(Batch& batch, const Shape& s, const void* x, std::int64_t tokens,
                               const LayerBuffers& layer) {
    const std::int64_t hidden = s.hidden, inter = s.intermediate, experts = s.experts;
    const std::size_t element = element_bytes(batch.spec->dtype);
    auto state = std::static_pointer_cast<WeightGradState>(batch.layout_state);
    if (!state) {
      state = std::make_shared<WeightGradState>();
      state->drouter = sized(experts * hidden, 4);
      state->dw_gate_up = sized(experts * 2 * inter * hidden, 4);
      state->dw_down = sized(experts * hidden * inter, 4);
      for (DeviceBuffer* buffer : {&state->drouter, &state->dw_gate_up, &state->dw_down})
        buffer->fill_bytes(0);
      batch.layout_state = state;
    }
    const DeviceDType type = device_dtype(batch.spec->dtype);
    const bool atomic = kind_ == Kind::atomic_dw;
    if (atomic) record_path("dw.atomic-chunks");
    for_each_expert(
        layer, [&](std::int64_t e, std::int64_t first, std::int64_t count, CUstream_st* stream) {
          float* down = state->dw_down.as<float>() + e * hidden * inter;
          float* gate_up = state->dw_gate_up.as<float>() + e * 2 * inter * hidden;
          const void* dout = at_row(layer.dout, first, hidden, element);
          const void* activation = at_row(layer.activation, first, inter, element);
          const void* dgate_up = at_row(layer.dgate_up, first, 2 * inter, element);
          const void* rows = at_row(layer.rows, first, hidden, element);
          if (atomic) {
            cuda::moe_dw_atomic_control(type, dout, activation, down, count, hidden, inter, stream);
            cuda::moe_dw_atomic_control(type, dgate_up, rows, gate_up, count, 2 * inter, hidden,
                                        stream);
            return;
          }
          expert_gemms_->weight_grad(dout, activation, down, count, hidden, inter, stream);
          expert_gemms_->weight_grad(dgate_up, rows, gate_up, count, 2 * inter, hidden, stream);
        });
    router_gemms_->weight_grad(layer.dlogits.get(), x, state->drouter.as<float>(), tokens, experts,
                               hidden, nullptr);
    if (batch.invocation_index + 1 < batch.invocation_count) return;
    cuda_support::download(state->drouter, batch.out("drouter"));
    cuda_support::download(state->dw_down, batch.out("dw_down"));
    split_gate_up(state->dw_gate_up, s, batch.out("dw_gate"), batch.out("dw_up"));
  }

  // [E, 2I, H] fp32 on the device -> dw_gate [E, I, H] and dw_up [E, I, H] on the host.
  static void split_gate_up(const DeviceBuffer& stacked, const Shape& s, Tensor& gate, Tensor& up) {
    const std::int64_t slab = s.intermediate * s.hidden;
    std::vector<float> host(static_cast<std::size_t>(2 * s.experts * slab));
    stacked.download(host.data(), host.size() * sizeof(float));
    const auto slab_bytes = static_cast<std::size_t>(slab) * sizeof(float);
    for (std::int64_t e = 0; e < s.experts; ++e) {
      const float* from = host.data() + 2 * e * slab;
      std::memcpy(static_cast<float*>(gate.data()) + e * slab, from, slab_bytes);
      std::memcpy(static_cast<float*>(up.data()) + e * slab, from + slab, slab_bytes);
    }
  }

  Kind kind_;
  std::shared_ptr<WeightCache> weights_;
  std::unique_ptr<moe::Gemms> expert_gemms_, router_gemms_;
  std::unique_ptr<cuda::ExpertStreams> streams_;
};

// How many experts the last call gave a token, whose weights it read.
std::int64_t experts_read(const LayerBuffers& layer) {
  return std::count_if(layer.count.begin(), layer.count.end(),
                       [](std::int64_t n) { return n > 0; });
}

// The bytes one forward call over `tokens` must move: x read and y written, the router, and the
// weights of the experts that got a token (a decode step reads few of them), from the last call.
double bytes_read_and_written(const Shape& s, std::size_t element, std::int64_t tokens,
                              const LayerBuffers& layer) {
  const std::int64_t elements = s.experts * s.hidden +
                                experts_read(layer) * 3 * s.intermediate * s.hidden +
                                2 * tokens * s.hidden;
  return static_cast<double>(elements) * static_cast<double>(element);
}

// The rows of the fixed-order expert GEMMs' one tile (moe_gemms_cuda.cpp).
constexpr std::int64_t expert_tile_rows = 128;

// Whether the last call was bound by its weights' bytes: fewer (token, expert) pairs per expert
// read, on average, than the rows of one tile of the expert GEMMs, as at decode.
bool memory_bound(std::int64_t tokens, std::int64_t topk, const LayerBuffers& layer) {
  const std::int64_t read = experts_read(layer);
  return read > 0 && tokens * topk < expert_tile_rows * read;
}

// The forward layer (routing, the experts' GEMMs, the combine) on device-resident inputs: random
// weights, and enough sets of x rotated that the caches do not hold them. The per-expert GEMM
// launches need each expert's row count on the host, read back once per call as in run().
std::optional<BenchMeasurement> CudaMoe::benchmark(const CaseSpec& spec,
                                                   const BenchSettings& settings) {
  const bool timed = kind_ == Kind::fixed_order || kind_ == Kind::cublaslt_pinned ||
                     kind_ == Kind::cublaslt_heuristic;
  if (spec.pass != Pass::forward || !timed) return std::nullopt;
  const Shape s = moe::shape_of(spec);
  const std::size_t element = element_bytes(spec.dtype);
  expert_gemms_->set_case(spec.dtype, nullptr);
  router_gemms_->set_case(spec.dtype, nullptr);
  const std::int64_t e = s.experts, h = s.hidden, i = s.intermediate;
  auto random = [&](std::int64_t elements, std::uint64_t seed) {
    return cuda_bench::random_input(static_cast<std::size_t>(elements) * element, spec.dtype, seed);
  };
  DeviceWeights w;
  place_weights(s, spec.dtype, expert_gemms_->needs_transposed(), random(e * h, 11),
                random(e * i * h, 12), random(e * i * h, 13), random(e * h * i, 14), w);
  const std::size_t x_bytes = static_cast<std::size_t>(spec.rows * h) * element;
  const std::size_t sets = cuda_bench::rotation_sets(x_bytes, settings);
  std::vector<DeviceBuffer> xs;
  for (std::size_t set = 0; set < sets; ++set) xs.push_back(random(spec.rows * h, 100 + set));
  LayerBuffers layer;
  BenchMeasurement measurement = cuda_bench::time_rotated(settings, sets, [&](std::size_t set) {
    forward_experts(s, spec.dtype, w, xs[set].get(), spec.rows, layer);
    combine(s, spec.dtype, spec.rows, layer);
  });
  measurement.flops = 2.0 * static_cast<double>(spec.rows) *
                      (static_cast<double>(e * h) + static_cast<double>(s.topk * 3 * i * h));
  measurement.bytes_moved = bytes_read_and_written(s, element, spec.rows, layer);
  measurement.also_against_copy = memory_bound(spec.rows, s.topk, layer);
  measurement.config = nlohmann::json::object();
  measurement.config["expert_streams"] = cuda::ExpertStreams::count;
  if (expert_gemms_->needs_transposed())
    measurement.config["expert_gemm"] = moe::fixed_order_expert_gemm(spec.dtype);
  return measurement;
}

std::vector<PathDecl> paths_of(Kind kind) {
  std::vector<PathDecl> paths = moe::gemm_paths(expert_gemm_path(kind));
  if (kind == Kind::atomic_combine || kind == Kind::atomic_dw) {
    for (PathDecl& decl : paths) decl.informative();
  }
  if (kind == Kind::atomic_combine)
    paths.emplace_back("combine.atomic-by-schedule",
                       "the k results added by atomicAdd on the dtype, one launch per expert in "
                       "the schedule's order");
  if (kind == Kind::atomic_dw)
    paths.emplace_back("dw.atomic-chunks",
                       "each expert's dW as partials of 32 rows added by atomicAdd");
  return paths;
}

}  // namespace

void register_moe_cuda(Registry& registry) {
  auto weights = std::make_shared<WeightCache>();
  auto variant = [&](Kind kind) { return CudaMoe::Variant{kind, weights}; };
  register_impls<CudaMoe, CudaMoe::Variant>(
      registry, "moe",
      {{ImplInfo::invariant(
            "fixed-order", "cuda",
            "our grouped GEMM: each expert's rows in token order through matmul's fixed-order "
            "GEMM with one tile shape (128x256) whatever its load, K in blocks of 64 in order, "
            "no split-K (portable fp32 FMA chain for fp32); the k results combined in fp32 in "
            "rank order; each expert's dW one FMA per token in token order")
            .with_paths(paths_of(Kind::fixed_order)),
        variant(Kind::fixed_order)},
       {ImplInfo::invariant(
            "cublaslt-pinned", "cuda",
            "cuBLASLt per expert with the pin table's configuration per (dtype, "
            "form, N, K): one split-K-1 configuration, or one per row bucket all of "
            "one bit-class; dW by the token-sequential fixed-order kernel")
            .with_paths(paths_of(Kind::cublaslt_pinned)),
        variant(Kind::cublaslt_pinned)},
       // Whether the library default drifts depends on the GPU, the shapes and the cuBLASLt
       // version: its cases are observations.
       {ImplInfo::library_default("cublaslt-heuristic", "cuda",
                                  "library default (observed): cuBLASLt's heuristic "
                                  "configuration per expert GEMM (split-K chosen per load), dW "
                                  "over the expert's tokens at once")
            .with_paths(paths_of(Kind::cublaslt_heuristic)),
        variant(Kind::cublaslt_heuristic)},
       {ImplInfo::control("split-k-by-load", "cuda",
                          "control: an expert with fewer than 4 tokens gets its GEMMs' K sums "
                          "split in 4 partials reduced in the dtype (the small-M bucket of a "
                          "fused-MoE config table)")
            .with_paths(paths_of(Kind::split_k_by_load)),
        variant(Kind::split_k_by_load)},
       {ImplInfo::control("atomic-combine", "cuda",
                          "control: the k results added onto y (dx) by atomicAdd on the dtype, "
                          "one launch per expert with the most loaded first, so a token's results "
                          "arrive in its experts' schedule order")
            .with_paths(paths_of(Kind::atomic_combine)),
        variant(Kind::atomic_combine)},
       {ImplInfo::control("atomic-dw", "cuda",
                          "control: each expert's dW as partials of 32 consecutive rows of its "
                          "list added by atomicAdd (the chunks follow the batch, the additions "
                          "the blocks' finish)")
            .drifting_in({Pass::backward})
            .with_paths(paths_of(Kind::atomic_dw)),
        variant(Kind::atomic_dw)}});
}

}  // namespace bitcheck
