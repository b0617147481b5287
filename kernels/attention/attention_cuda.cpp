// CUDA impls of attention: the fixed-order kernels (tensor-core forward and backward for bf16/fp16
// at head dim 64/128, SIMT elsewhere; no atomics) and three controls: split-KV with a split
// count from the batch, a KV block size from the sequence length, and atomicAdd dq accumulation.
// Host adapters: KV cache in the layout state, written before attention reads it; benchmark.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention_kernels.h"
#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/runtime.h"
#include "core/op.h"

namespace bitcheck {
namespace {

using cuda::AttentionBackwardTile;
using cuda::AttentionShape;
using cuda::AttentionTile;
using cuda::AttentionToken;
using cuda::DeviceBuffer;
using cuda::DeviceDType;
using cuda_support::device_dtype;
using cuda_support::upload;

// Split-KV control: aims for this many (sequence x split) work items, so few sequences get many
// splits (flash-decoding sizing its splits to fill the GPU).
constexpr int split_kv_target_items = 8;
constexpr int split_kv_max_splits = 8;
// Block-size control: a sequence ending at or below this many tokens uses KV blocks of 32 keys,
// a longer one blocks of 64.
constexpr int small_block_up_to_length = 64;
constexpr int fixed_simt_kv_block = 64;
// The fixed-order backward for bf16/fp16 at head dim 64/128 runs on the tensor-core kernels
// (attention_backward_mma: wgmma on sm_90, mma.sync elsewhere); fp32 and other head dims on the
// SIMT kernels (one warp per query for dq, per key for dk/dv). BITCHECK_ATTENTION_BACKWARD=simt
// forces the SIMT kernels everywhere, =mma-sync the mma.sync ones on sm_90, to bisect a backward
// drift between two paths.
bool tensor_core_backward() {
  static const bool enabled = [] {
    const char* path = std::getenv("BITCHECK_ATTENTION_BACKWARD");
    return !(path && std::string(path) == "simt");
  }();
  return enabled;
}

// The tensor-core forward a case runs: the device's, or a forced path (force_paths, or
// BITCHECK_ATTENTION_FORWARD=wgmma-synchronous to bisect a drift against the synchronous kernel).
cuda::AttentionForwardKernel forward_kernel(const CaseSpec& spec) {
  static const bool synchronous = [] {
    const char* kernel = std::getenv("BITCHECK_ATTENTION_FORWARD");
    return kernel && std::string(kernel) == "wgmma-synchronous";
  }();
  if (spec.forced_path == "forward.mma-sync") return cuda::AttentionForwardKernel::mma_sync;
  if (synchronous) return cuda::AttentionForwardKernel::wgmma_synchronous;
  return cuda::AttentionForwardKernel::automatic;
}

// The prefill schedule: ping-pong in L2 sections of the budget, unless forced to cooperative or to
// sections of one (sequence, KV head) pair; a decode launch's CTAs per SM, unless forced.
cuda::AttentionSchedule forward_schedule(const CaseSpec& spec) {
  if (spec.forced_path == "forward.wgmma.prefill.cooperative")
    return cuda::AttentionSchedule::cooperative;
  if (spec.forced_path == "forward.wgmma.prefill.l2-sections")
    return cuda::AttentionSchedule::l2_sections;
  if (spec.forced_path == "forward.wgmma.decode-ctas.one-per-sm")
    return cuda::AttentionSchedule::decode_one_per_sm;
  if (spec.forced_path == "forward.wgmma.decode-ctas.two-per-sm")
    return cuda::AttentionSchedule::decode_two_per_sm;
  return cuda::AttentionSchedule::automatic;
}

// The forward kernel's products, for configs.
std::string forward_products(const std::string& path) {
  if (path == "forward.mma-sync") return "mma.sync m16n8k16";
  if (path == "forward.wgmma.synchronous") return "wgmma m64n64k16 + m64nDk16";
  return "wgmma m64n64k16 (Q from registers) + m64nDk16";
}

DeviceBuffer output_buffer(std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  buffer.fill_bytes(0xFF);  // NaN in pad slots, as the runner poisons them
  return buffer;
}

// The KV cache of one layout execution: [tokens, KVH, D] in the case dtype, NaN at creation (all
// bytes 0xFF), so a kernel that reads a row no invocation has written yet (a later sequence's, or a
// later decode step's) shows: 0 times NaN is NaN, and the row's bits differ from its run alone.
struct KvCache {
  DeviceBuffer k, v;
};

AttentionShape shape_of(const CaseSpec& spec) {
  return {static_cast<int>(spec.dim("H")), static_cast<int>(spec.dim("KVH")),
          static_cast<int>(spec.dim("D")), attention::softmax_scale(spec)};
}

bool uses_mma(const CaseSpec& spec) {
  return spec.dtype != DType::fp32 && (spec.dim("D") == 64 || spec.dim("D") == 128);
}

// Tiles longest-running first (a tile's work grows with its last position), so the causal tail of
// the grid is short; the order changes no result.
std::vector<AttentionTile> tiles_of(const std::vector<AttentionToken>& first_tokens,
                                    const std::vector<int>& lengths) {
  std::vector<AttentionTile> tiles;
  for (std::size_t s = 0; s < first_tokens.size(); ++s) {
    for (int i = 0; i < lengths[s]; i += cuda::attention_mma_tile_queries) {
      const AttentionToken& t = first_tokens[s];
      tiles.push_back({t.slot + i, std::min(cuda::attention_mma_tile_queries, lengths[s] - i),
                       t.position + i, t.cache_base});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const AttentionTile& a, const AttentionTile& b) {
    return a.start_position + a.count > b.start_position + b.count;
  });
  return tiles;
}

// The tensor-core backward a case runs: the device's, or mma.sync when forced (force_paths).
cuda::AttentionBackwardKernel backward_kernel(const CaseSpec& spec) {
  return spec.forced_path == "backward.mma" ? cuda::AttentionBackwardKernel::mma_sync
                                            : cuda::AttentionBackwardKernel::automatic;
}

// The fixed-order backward: tensor cores where the dtype and head dim allow, else SIMT.
void fixed_order_backward(const CaseSpec& spec, DeviceDType dtype, const AttentionShape& shape,
                          const void* q, const void* k, const void* v, const void* o,
                          const float* lse, const void* dout, float* delta, void* dq, void* dk,
                          void* dv, const std::vector<AttentionToken>& tokens,
                          const DeviceBuffer& token_buffer,
                          const std::vector<AttentionToken>& first_tokens,
                          const std::vector<int>& lengths, int max_position) {
  if (tensor_core_backward() && uses_mma(spec)) {
    std::vector<int> first_slots;
    for (const AttentionToken& token : first_tokens) first_slots.push_back(token.slot);
    const int rows = cuda::attention_backward_tile_rows(backward_kernel(spec), shape.dim);
    cuda::AttentionBackwardTileLists tiles =
        cuda::attention_backward_tiles(first_slots, lengths, rows);
    const int count = static_cast<int>(tiles.queries.size());
    tiles.queries.insert(tiles.queries.end(), tiles.keys.begin(), tiles.keys.end());
    const DeviceBuffer tile_buffer = upload(tiles.queries);  // the queries' order, the keys'
    const auto* device_tile = tile_buffer.as<AttentionBackwardTile>();
    const cuda::AttentionBackwardTiles device_tiles{device_tile, device_tile + count, count, rows};
    cuda::attention_backward_mma(dtype, q, k, v, o, lse, dout, delta, dq, dk, dv,
                                 token_buffer.as<AttentionToken>(), static_cast<int>(tokens.size()),
                                 device_tiles, shape, nullptr, backward_kernel(spec));
    return;
  }
  cuda::attention_backward(dtype, q, k, v, o, lse, dout, delta, dq, dk, dv,
                           token_buffer.as<AttentionToken>(), static_cast<int>(tokens.size()),
                           max_position, shape, nullptr, nullptr);
}

const char* backward_path(const CaseSpec& spec, int dim) {
  if (!(tensor_core_backward() && uses_mma(spec)))
    return "simt, one warp per query (dq) and per key (dk, dv)";
  const cuda::AttentionBackwardKernel kernel = backward_kernel(spec);
  if ((kernel == cuda::AttentionBackwardKernel::automatic
           ? cuda::attention_backward_device_kernel()
           : kernel) != cuda::AttentionBackwardKernel::wgmma)
    return "mma.sync m16n8k16, dq per 64-query tile, dk/dv per 64-key tile";
  return cuda::attention_backward_tile_rows(kernel, dim) == cuda::attention_backward_pair_tile
             ? "wgmma m64n64k16 + m64nDk16, two warpgroups per CTA on a 128-query (dq) / "
               "128-key (dk, dv) pair of 64-row tiles"
             : "wgmma m64n64k16 + m64nDk16, a warpgroup per 64-query (dq) / 64-key (dk, "
               "dv) tile";
}

class CudaAttention : public Impl {
 public:
  enum class Kind { fixed_order, split_kv_by_batch, kv_block_by_length, atomic_dq };
  CudaAttention(ImplInfo info, Kind kind)
      : Impl(std::move(info.reading_row_inputs_on_device())), kind_(kind) {}

  // The fixed-order forward packs a KV group's heads from this many sequences on in a decode step
  // (sequences within one 2048-key chunk; longer ones, split at the chunks, pack sooner).
  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    if (kind_ != Kind::fixed_order || spec.pass != Pass::forward || !uses_mma(spec) ||
        !cuda::attention_forward_uses_wgmma())
      return {};
    const std::int64_t from = cuda::attention_packed_heads_sequences(shape_of(spec));
    if (from < 2 || from > max_rows) return {};
    const std::string decode = cuda::attention_warp_specialized_dim(static_cast<int>(spec.dim("D")))
                                   ? "forward.wgmma.decode"
                                   : "forward.wgmma.synchronous.decode";
    return {{from, decode, decode + ".packed-heads"}};
  }
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (spec.dim("D") > 128 || spec.dim("D") % 8)
      return "attention kernels need head dim <= 128 and a multiple of 8";
    return std::nullopt;
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const AttentionShape shape = shape_of(spec);
    const DeviceDType dtype = device_dtype(spec.dtype);
    const std::int64_t kv_width = spec.dim("KVH") * spec.dim("D");
    const std::size_t element = dtype_size(spec.dtype);
    if (!batch.layout_state) {
      auto created = std::make_shared<KvCache>();
      const std::size_t bytes =
          static_cast<std::size_t>(attention::sequence_offsets(spec).back() * kv_width) * element;
      created->k = DeviceBuffer(bytes);
      created->v = DeviceBuffer(bytes);
      created->k.fill_bytes(0xFF);
      created->v.fill_bytes(0xFF);
      batch.layout_state = created;
    }
    KvCache& cache = *static_cast<KvCache*>(batch.layout_state.get());

    // Tokens of the invocation; cache rows by slot (-1 for pad slots).
    std::vector<int> cache_rows(static_cast<std::size_t>(batch.slots()), -1), lengths;
    std::vector<AttentionToken> tokens, first_tokens;
    int max_position = 0;
    for (const Segment& segment : batch.invocation->segments) {
      const auto base = static_cast<int>(
          batch.invocation->slot_rows[static_cast<std::size_t>(segment.first_slot)] -
          segment.start_position);
      if (spec.pass == Pass::backward && segment.start_position != 0)
        throw std::invalid_argument("attention backward needs whole sequences");
      for (std::int64_t i = 0; i < segment.length; ++i) {
        const auto slot = static_cast<int>(segment.first_slot + i),
                   position = static_cast<int>(segment.start_position + i);
        cache_rows[static_cast<std::size_t>(slot)] = base + position;
        // Backward reads keys from the invocation's own slots: base = slot of position 0.
        const int key_base =
            spec.pass == Pass::forward ? base : static_cast<int>(segment.first_slot);
        tokens.push_back({slot, position, key_base, static_cast<int>(segment.length)});
        max_position = std::max(max_position, position);
      }
      first_tokens.push_back(
          {static_cast<int>(segment.first_slot), static_cast<int>(segment.start_position),
           spec.pass == Pass::forward ? base : static_cast<int>(segment.first_slot), 0});
      lengths.push_back(static_cast<int>(segment.length));
    }

    DeviceBuffer q = cuda_support::input_rows(batch, "q");
    DeviceBuffer k = cuda_support::input_rows(batch, "k");
    DeviceBuffer v = cuda_support::input_rows(batch, "v");
    const std::size_t q_bytes = cuda_support::input_bytes(batch, "q");
    const std::size_t kv_bytes = cuda_support::input_bytes(batch, "k");
    DeviceBuffer o = output_buffer(q_bytes),
                 lse = output_buffer(static_cast<std::size_t>(batch.slots() * shape.heads) *
                                     sizeof(float));
    if (spec.pass == Pass::forward) {
      // The cache is written before attention reads it; keys come from the cache only.
      DeviceBuffer rows = upload(cache_rows);
      cuda::attention_write_cache(dtype, k.get(), v.get(), cache.k.get(), cache.v.get(),
                                  rows.as<int>(), static_cast<int>(batch.slots()),
                                  static_cast<int>(kv_width), nullptr);
      forward(batch, dtype, shape, q, cache.k, cache.v, tokens, first_tokens, lengths, o, lse);
      cuda_support::hand_over_rows_all(batch, {{"o", &o}, {"lse", &lse}});
      return;
    }
    // Backward takes whole sequences: keys at their own slots, the forward recomputed from them.
    forward(batch, dtype, shape, q, k, v, tokens, first_tokens, lengths, o, lse);
    DeviceBuffer dout = cuda_support::input_rows(batch, "do");
    DeviceBuffer delta(static_cast<std::size_t>(batch.slots() * shape.heads) * sizeof(float));
    DeviceBuffer dq = output_buffer(q_bytes), dk = output_buffer(kv_bytes),
                 dv = output_buffer(kv_bytes);
    DeviceBuffer token_buffer = upload(tokens), atomic_scratch;
    if (kind_ == Kind::atomic_dq) {
      atomic_scratch = DeviceBuffer(
          static_cast<std::size_t>(batch.slots() * shape.heads * shape.dim) * sizeof(float));
      atomic_scratch.fill_bytes(0);
    }
    if (kind_ == Kind::atomic_dq) {
      cuda::attention_backward(dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                               dout.get(), delta.as<float>(), dq.get(), dk.get(), dv.get(),
                               token_buffer.as<AttentionToken>(), static_cast<int>(tokens.size()),
                               max_position, shape, atomic_scratch.as<float>(), nullptr);
    } else {
      fixed_order_backward(spec, dtype, shape, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                           dout.get(), delta.as<float>(), dq.get(), dk.get(), dv.get(), tokens,
                           token_buffer, first_tokens, lengths, max_position);
      batch.impl_config["backward_path"] = backward_path(spec, shape.dim);
    }
    cuda_support::hand_over_rows_all(batch, {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override;

 private:
  void forward(Batch& batch, DeviceDType dtype, const AttentionShape& shape, const DeviceBuffer& q,
               const DeviceBuffer& keys, const DeviceBuffer& values,
               const std::vector<AttentionToken>& tokens,
               const std::vector<AttentionToken>& first_tokens, const std::vector<int>& lengths,
               DeviceBuffer& o, DeviceBuffer& lse) {
    const CaseSpec& spec = *batch.spec;
    auto simt = [&](const std::vector<AttentionToken>& subset, int kv_block, int splits) {
      if (subset.empty()) return;
      DeviceBuffer token_buffer = upload(subset), scratch;
      if (splits > 1)
        scratch = DeviceBuffer(subset.size() *
                               static_cast<std::size_t>(shape.heads * splits * (shape.dim + 2)) *
                               sizeof(float));
      cuda::attention_forward_simt(dtype, q.get(), keys.get(), values.get(), o.get(),
                                   lse.as<float>(), token_buffer.as<AttentionToken>(),
                                   static_cast<int>(subset.size()), shape, kv_block, splits,
                                   splits > 1 ? scratch.as<float>() : nullptr, nullptr);
    };
    // The controls' forward (and the atomic-dq control's recompute, which stays fixed-order).
    if (kind_ == Kind::split_kv_by_batch) {
      const int sequences = std::max<int>(1, static_cast<int>(lengths.size()));
      const int splits = std::clamp(split_kv_target_items / sequences, 1, split_kv_max_splits);
      batch.impl_config = {{"path", "simt"}, {"kv_block", fixed_simt_kv_block}, {"splits", splits}};
      simt(tokens, fixed_simt_kv_block, splits);
      return;
    }
    if (kind_ == Kind::kv_block_by_length) {
      std::vector<AttentionToken> small, large;
      std::size_t next = 0;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        const bool is_small = first_tokens[s].position + lengths[s] <= small_block_up_to_length;
        for (int i = 0; i < lengths[s]; ++i) (is_small ? small : large).push_back(tokens[next++]);
      }
      batch.impl_config = {{"path", "simt"},
                           {"kv_block", "32 when the sequence ends at <= 64 tokens, else 64"}};
      simt(small, 32, 1);
      simt(large, 64, 1);
      return;
    }
    if (uses_mma(spec)) {
      const auto cache_rows = static_cast<std::int64_t>(
          keys.bytes() / static_cast<std::size_t>(shape.kv_heads * shape.dim) /
          dtype_size(spec.dtype));
      const cuda::AttentionForwardLaunch launch(dtype, shape, tiles_of(first_tokens, lengths),
                                                cache_rows, forward_kernel(spec),
                                                forward_schedule(spec));
      launch.run(q.get(), keys.get(), values.get(), o.get(), lse.as<float>());
      batch.impl_config = {{"path", launch.path()},
                           {"products", forward_products(launch.path())},
                           {"kv_block", cuda::attention_mma_kv_block},
                           {"chunk_keys", launch.chunk_keys()},
                           {"splits", launch.splits()}};
      if (launch.ctas_per_sm() > 0) batch.impl_config["ctas_per_sm"] = launch.ctas_per_sm();
      return;
    }
    batch.impl_config = {{"path", "simt"}, {"kv_block", fixed_simt_kv_block}, {"splits", 1}};
    simt(tokens, fixed_simt_kv_block, 1);
  }

  Kind kind_;
};

// One decode step of spec.rows sequences: each sequence's query at position L - 1 over a cache of L
// keys, with the kernel, KV blocks and 2048-key chunks the decode layout runs (split-KV at the
// chunks, merged in chunk order). Latency is the point; flops 2*2*L*H*D per sequence, bytes the
// cache read once.
BenchMeasurement decode_step_benchmark(const CaseSpec& spec, const BenchSettings& settings) {
  const AttentionShape shape = shape_of(spec);
  const DeviceDType dtype = device_dtype(spec.dtype);
  const auto length = static_cast<int>(spec.dim("L")), sequences = static_cast<int>(spec.rows);
  const std::size_t element = dtype_size(spec.dtype);
  const std::size_t q_bytes = static_cast<std::size_t>(sequences) *
                              static_cast<std::size_t>(shape.heads * shape.dim) * element;
  const std::size_t kv_bytes = static_cast<std::size_t>(length) *
                               static_cast<std::size_t>(sequences) *
                               static_cast<std::size_t>(shape.kv_heads * shape.dim) * element;
  DeviceBuffer q = cuda_bench::random_input(q_bytes, spec.dtype, 1),
               k = cuda_bench::random_input(kv_bytes, spec.dtype, 2),
               v = cuda_bench::random_input(kv_bytes, spec.dtype, 3), o(q_bytes);
  DeviceBuffer lse(static_cast<std::size_t>(sequences * shape.heads) * sizeof(float));
  std::vector<AttentionToken> tokens, first_tokens;
  std::vector<int> lengths;
  for (int s = 0; s < sequences; ++s) {
    tokens.push_back({s, length - 1, s * length, 1});
    first_tokens.push_back({s, length - 1, s * length, 1});
    lengths.push_back(1);
  }
  const bool mma = uses_mma(spec);
  DeviceBuffer token_buffer = upload(tokens);
  std::unique_ptr<cuda::AttentionForwardLaunch> launch;
  if (mma)
    launch = std::make_unique<cuda::AttentionForwardLaunch>(
        dtype, shape, tiles_of(first_tokens, lengths),
        static_cast<std::int64_t>(length) * sequences, forward_kernel(spec));
  BenchMeasurement measurement = cuda_bench::time_rotated(settings, 1, [&](std::size_t) {
    if (mma) {
      launch->run(q.get(), k.get(), v.get(), o.get(), lse.as<float>());
    } else {
      cuda::attention_forward_simt(dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                                   token_buffer.as<AttentionToken>(),
                                   static_cast<int>(tokens.size()), shape, fixed_simt_kv_block, 1,
                                   nullptr, nullptr);
    }
  });
  measurement.flops = 4.0 * sequences * static_cast<double>(length) * shape.heads * shape.dim;
  measurement.bytes_moved = static_cast<double>(2 * q_bytes + 2 * kv_bytes);
  measurement.config = {
      {"path", mma ? launch->path() : std::string("forward.simt")},
      {"products", mma ? forward_products(launch->path()) : std::string("simt")},
      {"sequences", sequences},
      {"cache_length", length},
      {"chunk_keys", mma ? launch->chunk_keys() : 0},
      {"splits", mma ? launch->splits() : 1},
      {"latency_us", measurement.median_ms * 1e3},
      {"note", "one query per sequence over the whole cache, split at fixed 2048-key chunks"}};
  return measurement;
}

// Times the fixed-order kernels on spec.rows sequences of exactly L tokens (no cache write: k and v
// serve as the cache). Forward: o and lse; backward: the forward recompute plus the backward.
// Causal flops: forward 2*2*L*L/2*H*D per sequence, backward 2.5x that. A spec entry whose only
// layout is "decode" times one decode step instead (decode_step_benchmark).
std::optional<BenchMeasurement> CudaAttention::benchmark(const CaseSpec& spec,
                                                         const BenchSettings& settings) {
  if (kind_ != Kind::fixed_order) return std::nullopt;
  if (spec.pass == Pass::forward && spec.layouts == std::vector<std::string>{"decode"})
    return decode_step_benchmark(spec, settings);
  const AttentionShape shape = shape_of(spec);
  const DeviceDType dtype = device_dtype(spec.dtype);
  const auto length = static_cast<int>(spec.dim("L")), sequences = static_cast<int>(spec.rows);
  const std::size_t element = dtype_size(spec.dtype),
                    tokens_total =
                        static_cast<std::size_t>(length) * static_cast<std::size_t>(sequences);
  const std::size_t q_bytes =
      tokens_total * static_cast<std::size_t>(shape.heads * shape.dim) * element;
  const std::size_t kv_bytes =
      tokens_total * static_cast<std::size_t>(shape.kv_heads * shape.dim) * element;
  DeviceBuffer q = cuda_bench::random_input(q_bytes, spec.dtype, 1),
               k = cuda_bench::random_input(kv_bytes, spec.dtype, 2),
               v = cuda_bench::random_input(kv_bytes, spec.dtype, 3), o(q_bytes),
               dout = cuda_bench::random_input(q_bytes, spec.dtype, 4), dq(q_bytes), dk(kv_bytes),
               dv(kv_bytes);
  DeviceBuffer lse(tokens_total * static_cast<std::size_t>(shape.heads) * sizeof(float)),
      delta(lse.bytes());
  std::vector<AttentionToken> tokens, first_tokens;
  std::vector<int> lengths;
  for (int s = 0; s < sequences; ++s) {
    for (int p = 0; p < length; ++p) tokens.push_back({s * length + p, p, s * length, length});
    first_tokens.push_back({s * length, 0, s * length, length});
    lengths.push_back(length);
  }
  DeviceBuffer token_buffer = upload(tokens);
  const bool mma = uses_mma(spec);
  std::unique_ptr<cuda::AttentionForwardLaunch> launch;
  if (mma)
    launch = std::make_unique<cuda::AttentionForwardLaunch>(
        dtype, shape, tiles_of(first_tokens, lengths), static_cast<std::int64_t>(tokens_total),
        forward_kernel(spec));
  auto run_forward = [&] {
    if (mma) {
      launch->run(q.get(), k.get(), v.get(), o.get(), lse.as<float>());
    } else {
      cuda::attention_forward_simt(dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                                   token_buffer.as<AttentionToken>(),
                                   static_cast<int>(tokens.size()), shape, fixed_simt_kv_block, 1,
                                   nullptr, nullptr);
    }
  };
  auto run_once = [&] {
    run_forward();
    if (spec.pass == Pass::backward) {
      fixed_order_backward(spec, dtype, shape, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                           dout.get(), delta.as<float>(), dq.get(), dk.get(), dv.get(), tokens,
                           token_buffer, first_tokens, lengths, length - 1);
    }
  };
  // One input set: attention is compute-bound at these lengths (see the config note).
  BenchMeasurement measurement =
      cuda_bench::time_rotated(settings, 1, [&](std::size_t) { run_once(); });
  const double forward_flops =
      4.0 * sequences * (static_cast<double>(length) * length / 2.0) * shape.heads * shape.dim;
  measurement.flops = spec.pass == Pass::forward
                          ? forward_flops
                          : forward_flops * 3.5;  // recompute + 2.5x backward
  measurement.bytes_moved = static_cast<double>(3 * q_bytes + 2 * kv_bytes);
  measurement.config = {
      {"path", mma ? launch->path() : std::string("forward.simt")},
      {"products", mma ? forward_products(launch->path()) : std::string("simt")},
      {"backward_path", backward_path(spec, shape.dim)},
      {"sequences", sequences},
      {"length", length},
      {"note", "inputs are not rotated: attention is compute-bound at these lengths"},
      {"tflops", measurement.flops / (measurement.median_ms * 1e-3) / 1e12}};
  return measurement;
}

}  // namespace

void register_attention_cuda(Registry& registry) {
  using Kind = CudaAttention::Kind;
  auto paths_of = [](Kind kind) { return cuda::attention_paths(static_cast<int>(kind)); };
  register_impls<CudaAttention, Kind>(
      registry, "attention",
      {{ImplInfo::invariant(
            "fixed-order", "cuda",
            "KV cache written first; KV blocks of 64 from position 0 upward for prefill, chunks "
            "and "
            "decode (bf16/fp16: on sm_90 at D 128 warp-specialized wgmma with the blocks in "
            "2048-key chunks merged in chunk order, decode split at the chunks, at D 64 the "
            "synchronous wgmma kernel; mma.sync elsewhere; SIMT for fp32); backward dq per query "
            "over key blocks and dk/dv per key over query blocks in order (mma.sync where the "
            "forward uses it), no atomics")
            .with_paths(paths_of(Kind::fixed_order)),
        Kind::fixed_order},
       {ImplInfo::control("split-kv-by-batch", "cuda",
                          "control: split-KV forward with max(1, 8 / sequences) splits combined by "
                          "log-sum-exp (flash-decoding sized by the batch)")
            .only_passes({Pass::forward})
            .with_paths(paths_of(Kind::split_kv_by_batch)),
        Kind::split_kv_by_batch},
       {ImplInfo::control("kv-block-by-length", "cuda",
                          "control: KV block of 32 keys for sequences ending at <= 64 tokens, else "
                          "64 (a prefill tile picked from the sequence length)")
            .only_passes({Pass::forward})
            .with_paths(paths_of(Kind::kv_block_by_length)),
        Kind::kv_block_by_length},
       {ImplInfo::control("atomic-dq", "cuda",
                          "control: backward dq from per-64-key-block partials added with "
                          "atomicAdd (flash-attention backward)")
            .only_passes({Pass::backward})
            .with_paths(paths_of(Kind::atomic_dq)),
        Kind::atomic_dq}});
}

}  // namespace bitcheck
