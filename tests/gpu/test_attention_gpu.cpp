// attention on the GPU: the fixed-order CUDA impl passes every sequence layout (tensor-core
// forward and backward for bf16/fp16 at head dim 64 and 128, SIMT for fp32); the warp-specialized
// forward gives every layout the prefill rows' bits across 2048-key chunk boundaries (with heads
// whose scores move the softmax's reference max mid-row), the bits of
// the synchronous wgmma kernel without chunks (and within the first chunk with them), on the
// sweeps' layouts and the bench shapes, and a tile's bits whichever of its persistent CTA's work
// items it is, in every run of a launch; the epilogue's division gives __fdiv_rn's bits; no forward
// path lets NaN in the KV cache past a sequence's last key into a row; the wgmma forward agrees
// with the mma.sync forward; the tensor-core backwards agree with the SIMT one, and on sm_90 the
// wgmma backward gives the mma.sync one's bits; and each CUDA control drifts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/attention_kernels.h"
#include "common/runtime.h"
#include "core/dtype.h"
#include "manifest.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

struct GpuWorld {
  Registry registry;
  Contract contract;
  GpuWorld() {
    register_all(registry);
    contract = load_embedded_contract(registry);
  }
};

GpuWorld& gpu_world() {
  static GpuWorld instance;
  return instance;
}

CaseResult run_attention(const std::string& impl, DType dtype, Pass pass, std::int64_t head_dim,
                         std::int64_t sequences) {
  CaseSpec spec;
  spec.op = "attention";
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.pass = pass;
  spec.dims = {{"H", 8}, {"KVH", 2}, {"D", head_dim}, {"L", 300}};
  spec.rows = sequences;
  spec.seed = 7;
  spec.layouts = {"seq_alone",  "varlen_packed", "padded",       "chunked_1",
                  "chunked_16", "chunked_64",    "chunked_1000", "decode"};
  Runner runner(gpu_world().registry, gpu_world().contract);
  return runner.run_case(spec);
}

std::string describe(const CaseResult& result) {
  std::string text = to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift) text += " [" + drift.layout + " " + drift.tensor + "]";
  for (const auto& accuracy : result.accuracy) {
    text +=
        " {" + accuracy.tensor + " max_abs_error " + std::to_string(accuracy.max_abs_error) + "}";
  }
  return text;
}

// Half-precision bits of uniform values in [-1, 1].
std::vector<std::uint16_t> random_halves(DType dtype, std::size_t count, std::mt19937& generator) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::uint16_t> bits(count);
  for (std::uint16_t& b : bits)
    b = dtype == DType::bf16 ? float_to_bf16_bits(uniform(generator))
                             : float_to_fp16_bits(uniform(generator));
  return bits;
}

cuda::DeviceBuffer upload_halves(const std::vector<std::uint16_t>& bits) {
  cuda::DeviceBuffer buffer(bits.size() * sizeof(std::uint16_t));
  buffer.upload(bits.data(), buffer.bytes());
  return buffer;
}

template <typename T>
cuda::DeviceBuffer upload_items(const std::vector<T>& items) {
  cuda::DeviceBuffer buffer(items.size() * sizeof(T));
  buffer.upload(items.data(), buffer.bytes());
  return buffer;
}

std::vector<float> download_floats(DType dtype, const cuda::DeviceBuffer& buffer) {
  std::vector<std::uint16_t> bits(buffer.bytes() / sizeof(std::uint16_t));
  buffer.download(bits.data(), buffer.bytes());
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i)
    values[i] = dtype == DType::bf16 ? bf16_bits_to_float(bits[i]) : fp16_bits_to_float(bits[i]);
  return values;
}

// max |a - b| over the tensor, relative to max |reference|; infinite when either holds a NaN.
double relative_max_abs_diff(const std::vector<float>& a, const std::vector<float>& reference) {
  double diff = 0.0, magnitude = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(reference[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - reference[i]));
    magnitude = std::max(magnitude, std::fabs(static_cast<double>(reference[i])));
  }
  return diff / std::max(magnitude, 1e-30);
}

struct BackwardGradients {
  std::vector<float> dq, dk, dv;
};

enum class BackwardKernel { simt, mma_sync, wgmma };

// One packed batch of sequences (lengths 1, 63, 64, 65, 200 and 700: every tile, pair and block
// edge, and at 700 more blocks than the paired kernels' stages), forward on tensor cores, then the
// SIMT or a tensor-core backward on the same inputs.
BackwardGradients run_backward_paths(DType dtype, int head_dim, BackwardKernel kernel) {
  const std::vector<int> lengths = {1, 63, 64, 65, 200, 700};
  const cuda::AttentionShape shape{8, 2, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  std::vector<cuda::AttentionToken> tokens;
  std::vector<cuda::AttentionTile> forward_tiles;
  std::vector<int> first_slots;
  int slots = 0, max_position = 0;
  for (int length : lengths) {
    for (int p = 0; p < length; ++p) tokens.push_back({slots + p, p, slots, length});
    for (int i = 0; i < length; i += cuda::attention_mma_tile_queries) {
      forward_tiles.push_back(
          {slots + i, std::min(cuda::attention_mma_tile_queries, length - i), i, slots});
    }
    first_slots.push_back(slots);
    slots += length;
    max_position = std::max(max_position, length - 1);
  }
  const cuda::AttentionBackwardKernel tensor_kernel = kernel == BackwardKernel::wgmma
                                                          ? cuda::AttentionBackwardKernel::wgmma
                                                          : cuda::AttentionBackwardKernel::mma_sync;
  const int tile_rows = cuda::attention_backward_tile_rows(tensor_kernel, head_dim);
  const cuda::AttentionBackwardTileLists tiles =
      cuda::attention_backward_tiles(first_slots, lengths, tile_rows);
  const std::size_t q_elements = static_cast<std::size_t>(slots) * shape.heads * head_dim;
  const std::size_t kv_elements = static_cast<std::size_t>(slots) * shape.kv_heads * head_dim;
  std::mt19937 generator(11);
  const cuda::DeviceBuffer q = upload_halves(random_halves(dtype, q_elements, generator));
  const cuda::DeviceBuffer k = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer v = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer dout = upload_halves(random_halves(dtype, q_elements, generator));
  cuda::DeviceBuffer o(q_elements * 2),
      lse(static_cast<std::size_t>(slots) * shape.heads * sizeof(float)), delta(lse.bytes());
  cuda::DeviceBuffer dq(q_elements * 2), dk(kv_elements * 2), dv(kv_elements * 2);
  for (cuda::DeviceBuffer* gradient : {&dq, &dk, &dv})
    gradient->fill_bytes(0xFF);  // NaN where a kernel writes nothing
  const cuda::DeviceBuffer token_buffer = upload_items(tokens);
  const cuda::DeviceBuffer query_tiles = upload_items(tiles.queries),
                           key_tiles = upload_items(tiles.keys);
  const cuda::DeviceDType device_dtype =
      dtype == DType::bf16 ? cuda::DeviceDType::bf16 : cuda::DeviceDType::fp16;
  const cuda::AttentionForwardLaunch forward(device_dtype, shape, forward_tiles, slots);
  forward.run(q.get(), k.get(), v.get(), o.get(), lse.as<float>());
  if (kernel != BackwardKernel::simt) {
    const cuda::AttentionBackwardTiles device_tiles{
        query_tiles.as<cuda::AttentionBackwardTile>(), key_tiles.as<cuda::AttentionBackwardTile>(),
        static_cast<int>(tiles.queries.size()), tile_rows};
    cuda::attention_backward_mma(
        device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(), dout.get(),
        delta.as<float>(), dq.get(), dk.get(), dv.get(), token_buffer.as<cuda::AttentionToken>(),
        static_cast<int>(tokens.size()), device_tiles, shape, nullptr, tensor_kernel);
  } else {
    cuda::attention_backward(
        device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(), dout.get(),
        delta.as<float>(), dq.get(), dk.get(), dv.get(), token_buffer.as<cuda::AttentionToken>(),
        static_cast<int>(tokens.size()), max_position, shape, nullptr, nullptr);
  }
  return {download_floats(dtype, dq), download_floats(dtype, dk), download_floats(dtype, dv)};
}

// A packed batch of sequences (sequence s at slots offsets[s] .. offsets[s] + lengths[s] - 1, each
// its own KV cache base) with its q, k and v drawn on the device. k and v serve as the cache.
struct ForwardBatch {
  DType dtype;
  cuda::AttentionShape shape;
  std::vector<int> lengths, offsets;
  int slots = 0;
  cuda::DeviceBuffer q, k, v;

  ForwardBatch(DType element, int heads, int kv_heads, int head_dim,
               std::vector<int> sequence_lengths, std::uint64_t seed)
      : dtype(element),
        shape{heads, kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))},
        lengths(std::move(sequence_lengths)) {
    for (int length : lengths) {
      offsets.push_back(slots);
      slots += length;
    }
    q = cuda::DeviceBuffer(q_elements() * 2);
    k = cuda::DeviceBuffer(static_cast<std::size_t>(slots) * kv_heads * head_dim * 2);
    v = cuda::DeviceBuffer(k.bytes());
    q.fill_uniform(device_dtype(), seed);
    k.fill_uniform(device_dtype(), seed + 1);
    v.fill_uniform(device_dtype(), seed + 2);
    widen_odd_heads();
  }
  // The queries of every odd head times attention::wide_query_scale (8: exact), as the sweeps'
  // attention inputs have them: scores wide enough that a block after a row's first raises its
  // max past the rescale threshold, so the reference max moves mid-row.
  void widen_odd_heads() {
    std::vector<std::uint16_t> bits(q_elements());
    q.download(bits.data(), q.bytes());
    const std::size_t width = static_cast<std::size_t>(shape.dim);
    for (std::size_t i = 0; i < bits.size(); ++i) {
      if ((i / width) % static_cast<std::size_t>(shape.heads) % 2 == 0) continue;
      const float wide =
          attention::wide_query_scale *
          (dtype == DType::bf16 ? bf16_bits_to_float(bits[i]) : fp16_bits_to_float(bits[i]));
      bits[i] = dtype == DType::bf16 ? float_to_bf16_bits(wide) : float_to_fp16_bits(wide);
    }
    q.upload(bits.data(), q.bytes());
  }
  std::size_t q_elements() const {
    return static_cast<std::size_t>(slots) * shape.heads * shape.dim;
  }
  cuda::DeviceDType device_dtype() const {
    return dtype == DType::bf16 ? cuda::DeviceDType::bf16 : cuda::DeviceDType::fp16;
  }
  int position_of(int slot) const {  // the position of the token at `slot`
    const auto s = std::upper_bound(offsets.begin(), offsets.end(), slot) - offsets.begin() - 1;
    return slot - offsets[static_cast<std::size_t>(s)];
  }
};

// The launches of one layout, each a list of tiles of one segment (at most 128 queries each).
using Launches = std::vector<std::vector<cuda::AttentionTile>>;

// Tokens [start, start + count) of sequence s as tiles of up to 128 queries.
void append_tiles(std::vector<cuda::AttentionTile>& tiles, const ForwardBatch& batch, int s,
                  int start, int count) {
  const int base = batch.offsets[static_cast<std::size_t>(s)];
  for (int i = 0; i < count; i += cuda::attention_mma_tile_queries)
    tiles.push_back(
        {base + start + i, std::min(cuda::attention_mma_tile_queries, count - i), start + i, base});
}

// Chunked prefill: launch j holds tokens [j * chunk, (j + 1) * chunk) of every sequence that long;
// chunk 0 (or a chunk longer than every sequence) is the whole prefill in one launch.
Launches chunked_launches(const ForwardBatch& batch, int chunk) {
  const int longest = *std::max_element(batch.lengths.begin(), batch.lengths.end());
  if (chunk <= 0) chunk = longest;
  Launches launches;
  for (int start = 0; start < longest; start += chunk) {
    std::vector<cuda::AttentionTile> tiles;
    for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
      const int length = batch.lengths[s];
      if (length > start)
        append_tiles(tiles, batch, static_cast<int>(s), start, std::min(chunk, length - start));
    }
    std::stable_sort(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) {
      return a.start_position + a.count > b.start_position + b.count;  // longest first
    });
    launches.push_back(std::move(tiles));
  }
  return launches;
}

// The layouts the sweeps run, as launches: prefill, chunks of 1, 16, 64, 256 and 1000 (chunks of 1
// are the decode steps).
std::vector<std::pair<std::string, Launches>> layout_launches(const ForwardBatch& batch) {
  std::vector<std::pair<std::string, Launches>> layouts = {{"prefill", chunked_launches(batch, 0)}};
  for (int chunk : {1, 16, 64, 256, 1000})
    layouts.emplace_back("chunked_" + std::to_string(chunk), chunked_launches(batch, chunk));
  return layouts;
}

// o (16-bit) and lse (fp32) bits of every slot; the buffers start as all-ones (NaN) bits.
struct ForwardBits {
  std::vector<std::uint16_t> o;
  std::vector<std::uint32_t> lse;
};

// A KV cache other than the batch's own k and v (the same keys at other rows): cache_rows rows,
// sequence s's keys from row bases[s].
struct KvCacheView {
  const cuda::DeviceBuffer *k, *v;
  std::int64_t cache_rows;
  std::vector<int> bases;
};

ForwardBits run_launches(const ForwardBatch& batch, const Launches& launches,
                         cuda::AttentionForwardKernel kernel,
                         cuda::AttentionSchedule schedule = cuda::AttentionSchedule::automatic,
                         const KvCacheView* cache = nullptr) {
  cuda::DeviceBuffer o(batch.q_elements() * 2),
      lse(static_cast<std::size_t>(batch.slots) * batch.shape.heads * sizeof(float));
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  for (std::vector<cuda::AttentionTile> tiles : launches) {
    if (cache) {  // each tile's cache base moves to its sequence's rows in the other cache
      for (cuda::AttentionTile& tile : tiles) {
        const auto s = std::find(batch.offsets.begin(), batch.offsets.end(), tile.cache_base) -
                       batch.offsets.begin();
        tile.cache_base = cache->bases.at(static_cast<std::size_t>(s));
      }
    }
    const cuda::AttentionForwardLaunch launch(batch.device_dtype(), batch.shape, tiles,
                                              cache ? cache->cache_rows : batch.slots, kernel,
                                              schedule);
    launch.run(batch.q.get(), cache ? cache->k->get() : batch.k.get(),
               cache ? cache->v->get() : batch.v.get(), o.get(), lse.as<float>());
  }
  ForwardBits bits{
      std::vector<std::uint16_t>(batch.q_elements()),
      std::vector<std::uint32_t>(static_cast<std::size_t>(batch.slots) * batch.shape.heads)};
  o.download(bits.o.data(), o.bytes());
  lse.download(bits.lse.data(), lse.bytes());
  return bits;
}

// How two runs compare, slot by slot: rows whose o or lse bits differ, split by whether the
// token's position is below attention_chunk_keys (within the first chunk), and rows a run left
// unwritten.
struct RowComparison {
  int differ_first_chunk = 0, differ_later = 0, unwritten = 0;
  double max_relative_diff = 0.0;  // of o over the later rows, against max |b|
};
RowComparison compare_rows(const ForwardBatch& batch, const ForwardBits& a, const ForwardBits& b) {
  RowComparison result;
  const std::size_t row = static_cast<std::size_t>(batch.shape.heads) * batch.shape.dim;
  const auto as_float = [&](std::uint16_t bits) {
    return batch.dtype == DType::bf16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
  };
  double diff = 0.0, magnitude = 1e-30;
  for (int slot = 0; slot < batch.slots; ++slot) {
    const std::size_t first = static_cast<std::size_t>(slot) * row;
    bool same = std::equal(a.o.begin() + first, a.o.begin() + first + row, b.o.begin() + first);
    for (int h = 0; h < batch.shape.heads; ++h) {
      const std::size_t i = static_cast<std::size_t>(slot) * batch.shape.heads + h;
      same = same && a.lse[i] == b.lse[i];
      if (a.lse[i] == 0xFFFFFFFFu || b.lse[i] == 0xFFFFFFFFu) ++result.unwritten;
    }
    for (std::size_t e = first; e < first + row; ++e) {
      if (a.o[e] == 0xFFFF || b.o[e] == 0xFFFF) ++result.unwritten;
      diff = std::max(diff, std::fabs(static_cast<double>(as_float(a.o[e])) - as_float(b.o[e])));
      magnitude = std::max(magnitude, std::fabs(static_cast<double>(as_float(b.o[e]))));
    }
    if (same) continue;
    (batch.position_of(slot) < cuda::attention_chunk_keys ? result.differ_first_chunk
                                                          : result.differ_later)++;
  }
  result.max_relative_diff = diff / magnitude;
  return result;
}

// Lengths around every block (64), tile (128) and chunk (attention_chunk_keys, C) edge, and the
// chunks' former 512-key edge, up to 2C + 300 (three chunks).
constexpr int chunk = cuda::attention_chunk_keys;
const std::vector<int> edge_lengths = {
    1, 63, 64, 65, 200, 511, 512, 513, chunk - 1, chunk, chunk + 1, chunk + 200, 2 * chunk + 300};

// 40 sequences: 24 of lengths uniform in [1, 1100] and 16 in [C + 1, C + 400]. Decode steps with
// enough CTAs to pack the heads within the first chunk (40 x 2 KV heads >= 64 CTAs) and past it
// (16 sequences x 2 chunks x 2 KV heads), split at the chunks.
std::vector<int> many_lengths() {
  std::mt19937 generator(40);
  std::uniform_int_distribution<int> short_length(1, 1100), long_length(chunk + 1, chunk + 400);
  std::vector<int> lengths;
  for (int s = 0; s < 40; ++s)
    lengths.push_back(s % 5 < 3 ? short_length(generator) : long_length(generator));
  return lengths;
}

}  // namespace

TEST_CASE("attention forward layouts give the prefill rows' bits across chunk boundaries",
          "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) {
    WARN("not an sm_90 device: the chunked warp-specialized forward does not run here");
    return;
  }
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      for (bool many : {false, true}) {
        const ForwardBatch batch(dtype, 8, 2, head_dim, many ? many_lengths() : edge_lengths,
                                 many ? 17 : 5);
        const ForwardBits prefill = run_launches(batch, chunked_launches(batch, 0),
                                                 cuda::AttentionForwardKernel::automatic);
        for (const auto& [layout, launches] : layout_launches(batch)) {
          const ForwardBits bits =
              run_launches(batch, launches, cuda::AttentionForwardKernel::automatic);
          const RowComparison rows = compare_rows(batch, bits, prefill);
          INFO(to_string(dtype) << " D=" << head_dim << " " << batch.lengths.size()
                                << " sequences, " << layout);
          CHECK(rows.unwritten == 0);
          CHECK(rows.differ_first_chunk == 0);
          CHECK(rows.differ_later == 0);
          // Decode-like launches (tiles of 1 and 16 queries) forced to either CTA shape: one CTA
          // per SM on 4 stages, two on 2 each. The automatic pick takes both across these steps.
          if (head_dim != 128 || (layout != "chunked_1" && layout != "chunked_16")) continue;
          for (cuda::AttentionSchedule forced : {cuda::AttentionSchedule::decode_one_per_sm,
                                                 cuda::AttentionSchedule::decode_two_per_sm}) {
            INFO((forced == cuda::AttentionSchedule::decode_one_per_sm ? "one" : "two")
                 << " CTA(s) per SM");
            const RowComparison shaped = compare_rows(
                batch,
                run_launches(batch, launches, cuda::AttentionForwardKernel::automatic, forced),
                prefill);
            CHECK(shaped.unwritten == 0);
            CHECK(shaped.differ_first_chunk == 0);
            CHECK(shaped.differ_later == 0);
          }
        }
        // The comparison sees a one-bit change.
        ForwardBits flipped = prefill;
        flipped.o[flipped.o.size() - 1] ^= 1;
        const RowComparison one = compare_rows(batch, flipped, prefill);
        CHECK(one.differ_first_chunk + one.differ_later == 1);
      }
    }
  }
}

TEST_CASE("attention decode steps split at the chunks pack and split as planned",
          "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  const cuda::AttentionShape shape{8, 2, 128, 1.0f / std::sqrt(128.0f)};
  // One sequence at position 2C + 300: three chunks, a head per CTA (3 x 8 CTAs < 64).
  const int position = 2 * chunk + 300;
  const cuda::AttentionForwardLaunch one(cuda::DeviceDType::bf16, shape, {{0, 1, position, 0}},
                                         position + 1);
  CHECK(one.path() == "forward.wgmma.decode.split-kv");
  CHECK(one.splits() == 3);
  // 40 sequences within one chunk: 40 x 2 KV heads >= 64 CTAs, the heads of a group packed.
  std::vector<cuda::AttentionTile> tiles;
  for (int s = 0; s < 40; ++s) tiles.push_back({s, 1, 300, s * 301});
  const cuda::AttentionForwardLaunch packed(cuda::DeviceDType::bf16, shape, tiles, 40 * 301);
  CHECK(packed.path() == "forward.wgmma.decode.packed-heads");
  CHECK(packed.splits() == 1);
  // 16 sequences past key C - 1: 16 x 2 chunks x 2 KV heads >= 64 CTAs, packed and split; 15 are
  // not enough to pack.
  for (int count : {16, 15}) {
    std::vector<cuda::AttentionTile> long_tiles;
    for (int s = 0; s < count; ++s) long_tiles.push_back({s, 1, chunk + 100, s * (chunk + 101)});
    const cuda::AttentionForwardLaunch split(cuda::DeviceDType::bf16, shape, long_tiles,
                                             count * (chunk + 101));
    CHECK(split.path() == (count == 16 ? "forward.wgmma.decode.packed-heads.split-kv"
                                       : "forward.wgmma.decode.split-kv"));
    CHECK(split.splits() == 2);
  }
  // A prefill launch: two consumer warpgroups.
  const cuda::AttentionForwardLaunch prefill(cuda::DeviceDType::bf16, shape, {{0, 128, 0, 0}}, 128);
  CHECK(prefill.path() == "forward.wgmma.prefill");
  CHECK(prefill.ctas_per_sm() == 0);
}

TEST_CASE("decode launches run one CTA per SM up to the SM count, two past it",
          "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  const int sms = cuda::query_device().sm_count;
  REQUIRE(sms > 2);
  // One sequence within the first chunk, 8 heads: a CTA per head. Then 2 KV heads packed: one CTA
  // per KV head and sequence, and exactly as many sequences as fill the SMs, and one more.
  const cuda::AttentionShape shape{8, 2, 128, 1.0f / std::sqrt(128.0f)};
  const cuda::AttentionForwardLaunch one(cuda::DeviceDType::bf16, shape, {{0, 1, 300, 0}}, 301);
  CHECK(one.ctas_per_sm() == 1);
  const int full = sms / 2;
  for (int count : {full, full + 1}) {
    std::vector<cuda::AttentionTile> tiles;
    for (int s = 0; s < count; ++s) tiles.push_back({s, 1, 300, s * 301});
    const cuda::AttentionForwardLaunch packed(cuda::DeviceDType::bf16, shape, tiles, count * 301);
    INFO(count << " sequences, " << sms << " SMs");
    REQUIRE(packed.path() == "forward.wgmma.decode.packed-heads");
    CHECK(packed.ctas_per_sm() == (2 * count <= sms ? 1 : 2));
    // Forced either way, whatever the size.
    for (auto [forced, ctas] : {std::pair{cuda::AttentionSchedule::decode_one_per_sm, 1},
                                std::pair{cuda::AttentionSchedule::decode_two_per_sm, 2}}) {
      const cuda::AttentionForwardLaunch shaped(cuda::DeviceDType::bf16, shape, tiles, count * 301,
                                                cuda::AttentionForwardKernel::automatic, forced);
      CHECK(shaped.ctas_per_sm() == ctas);
    }
  }
}

TEST_CASE("the warp-specialized forward gives the synchronous kernel's bits", "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    {
      const int head_dim = 128;  // the warp-specialized kernels' head dim
      for (bool many : {false, true}) {
        const ForwardBatch batch(dtype, 8, 2, head_dim, many ? many_lengths() : edge_lengths,
                                 many ? 23 : 9);
        for (const auto& [layout, launches] : layout_launches(batch)) {
          INFO(to_string(dtype) << " D=" << head_dim << " " << batch.lengths.size()
                                << " sequences, " << layout);
          const ForwardBits synchronous =
              run_launches(batch, launches, cuda::AttentionForwardKernel::wgmma_synchronous);
          // Without chunks: the same bits in every row.
          const RowComparison unchunked =
              compare_rows(batch,
                           run_launches(batch, launches,
                                        cuda::AttentionForwardKernel::warp_specialized_unchunked),
                           synchronous);
          CHECK(unchunked.unwritten == 0);
          CHECK(unchunked.differ_first_chunk == 0);
          CHECK(unchunked.differ_later == 0);
          // With chunks: the same bits within the first chunk; later rows merge chunk states,
          // which moves some of their bits (and only by rounding).
          const RowComparison chunked = compare_rows(
              batch, run_launches(batch, launches, cuda::AttentionForwardKernel::automatic),
              synchronous);
          CHECK(chunked.unwritten == 0);
          CHECK(chunked.differ_first_chunk == 0);
          CHECK(chunked.differ_later > 0);
          CHECK(chunked.max_relative_diff < (dtype == DType::bf16 ? 2e-2 : 4e-3));
        }
      }
    }
  }
}

TEST_CASE("the warp-specialized forward keeps its bits on the bench shapes", "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  struct BenchShape {
    int head_dim, length;
  };
  // Head dim 64 runs the synchronous kernel (no chunks): the same comparisons, all rows equal.
  for (BenchShape bench : {BenchShape{128, 1024}, BenchShape{128, 2048}, BenchShape{128, 4096},
                           BenchShape{128, 8192}, BenchShape{64, 2048}, BenchShape{64, 4096}}) {
    const ForwardBatch batch(DType::bf16, 32, 8, bench.head_dim, std::vector<int>(4, bench.length),
                             static_cast<std::uint64_t>(bench.length));
    INFO("D=" << bench.head_dim << " L=" << bench.length << ", 4 sequences, 32 heads, 8 KV heads");
    const Launches prefill = chunked_launches(batch, 0);
    const ForwardBits synchronous =
        run_launches(batch, prefill, cuda::AttentionForwardKernel::wgmma_synchronous);
    if (bench.head_dim == 128) {
      const ForwardBits unchunked =
          run_launches(batch, prefill, cuda::AttentionForwardKernel::warp_specialized_unchunked);
      CHECK(unchunked.o == synchronous.o);
      CHECK(unchunked.lse == synchronous.lse);
    }
    // Both schedules of the two consumer warpgroups give the same bits.
    const ForwardBits pingpong = run_launches(
        batch, prefill, cuda::AttentionForwardKernel::automatic, cuda::AttentionSchedule::pingpong);
    const ForwardBits cooperative =
        run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic,
                     cuda::AttentionSchedule::cooperative);
    CHECK(pingpong.o == cooperative.o);
    CHECK(pingpong.lse == cooperative.lse);
    // The work order is scheduling: one (sequence, KV head) pair per L2 section against the
    // default 16 MiB sections (one at L <= 2048 here, several at 4096 and 8192).
    const ForwardBits sections =
        run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic,
                     cuda::AttentionSchedule::l2_sections);
    CHECK(pingpong.o == sections.o);
    CHECK(pingpong.lse == sections.lse);
    const RowComparison chunked = compare_rows(batch, pingpong, synchronous);
    CHECK(chunked.unwritten == 0);
    CHECK(chunked.differ_first_chunk == 0);
    CHECK(chunked.max_relative_diff < 2e-2);
    if (bench.head_dim == 64) CHECK(chunked.differ_later == 0);
    // The decode step of each sequence's last query, split at the chunks, gives the prefill row.
    std::vector<cuda::AttentionTile> step;
    for (int s = 0; s < 4; ++s)
      step.push_back({batch.offsets[static_cast<std::size_t>(s)] + bench.length - 1, 1,
                      bench.length - 1, batch.offsets[static_cast<std::size_t>(s)]});
    // So does the first sequence's step alone (the decode bench's batch 1), and each with its CTAs
    // forced to either shape (automatic: one per SM at these sizes).
    const std::size_t row = static_cast<std::size_t>(batch.shape.heads) * bench.head_dim;
    for (const std::vector<cuda::AttentionTile>& tiles :
         {step, std::vector<cuda::AttentionTile>{step.front()}}) {
      for (cuda::AttentionSchedule schedule :
           {cuda::AttentionSchedule::automatic, cuda::AttentionSchedule::decode_one_per_sm,
            cuda::AttentionSchedule::decode_two_per_sm}) {
        INFO(tiles.size() << " sequence(s), schedule " << static_cast<int>(schedule));
        const ForwardBits decoded =
            run_launches(batch, {tiles}, cuda::AttentionForwardKernel::automatic, schedule);
        for (const cuda::AttentionTile& tile : tiles) {
          const auto first =
              static_cast<std::ptrdiff_t>(static_cast<std::size_t>(tile.first_slot) * row);
          CHECK(std::equal(decoded.o.begin() + first,
                           decoded.o.begin() + first + static_cast<std::ptrdiff_t>(row),
                           pingpong.o.begin() + first));
          for (int h = 0; h < batch.shape.heads; ++h) {
            const std::size_t i = static_cast<std::size_t>(tile.first_slot) * batch.shape.heads + h;
            CHECK(decoded.lse[i] == pingpong.lse[i]);
          }
        }
      }
    }
  }
}

TEST_CASE("persistent prefill CTAs give each tile the bits it gets launched alone",
          "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  // 4 sequences of 2048 tokens, 32 heads: 64 tiles x 32 heads = 2048 work items, about 16 for each
  // persistent CTA. Every fifth tile launched alone is 32 items, each the first of its CTA.
  const int length = 2048;
  const ForwardBatch batch(DType::bf16, 32, 8, 128, std::vector<int>(4, length), 17);
  const Launches prefill = chunked_launches(batch, 0);
  const ForwardBits together =
      run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic);
  Launches alone;
  for (std::size_t i = 0; i < prefill[0].size(); i += 5) alone.push_back({prefill[0][i]});
  const ForwardBits separate = run_launches(batch, alone, cuda::AttentionForwardKernel::automatic);
  const std::size_t row = static_cast<std::size_t>(batch.shape.heads) * batch.shape.dim;
  int rows = 0, differ = 0;
  for (const auto& launch : alone) {
    const cuda::AttentionTile& tile = launch.front();
    for (int slot = tile.first_slot; slot < tile.first_slot + tile.count; ++slot, ++rows) {
      const auto o = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(slot) * row);
      const auto lse = static_cast<std::ptrdiff_t>(slot) * batch.shape.heads;
      const bool same =
          std::equal(separate.o.begin() + o,
                     separate.o.begin() + o + static_cast<std::ptrdiff_t>(row),
                     together.o.begin() + o) &&
          std::equal(separate.lse.begin() + lse, separate.lse.begin() + lse + batch.shape.heads,
                     together.lse.begin() + lse);
      if (!same) ++differ;
    }
  }
  INFO(rows << " rows of " << alone.size() << " tiles launched alone");
  CHECK(rows == static_cast<int>(alone.size()) * cuda::attention_mma_tile_queries);
  CHECK(differ == 0);
}

TEST_CASE("a persistent prefill launch run again and again takes every work item each time",
          "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) return;
  // The persistent CTAs take their items from one counter per launch, which the launch's last take
  // sets back to 0. Left at its end, a second run would hand out no item past each CTA's first:
  // most rows would stay NaN.
  const ForwardBatch batch(DType::bf16, 32, 8, 128, {700, 2048, 1, 1300, 513}, 23);
  const Launches prefill = chunked_launches(batch, 0);
  REQUIRE(prefill.size() == 1);
  const ForwardBits fresh = run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic);
  CHECK(compare_rows(batch, fresh, fresh).unwritten == 0);
  const cuda::AttentionForwardLaunch launch(batch.device_dtype(), batch.shape, prefill[0],
                                            batch.slots);
  REQUIRE(launch.path() == "forward.wgmma.prefill");
  cuda::DeviceBuffer o(batch.q_elements() * 2),
      lse(static_cast<std::size_t>(batch.slots) * batch.shape.heads * sizeof(float));
  for (int run = 0; run < 3; ++run) {
    o.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    launch.run(batch.q.get(), batch.k.get(), batch.v.get(), o.get(), lse.as<float>());
    ForwardBits again{std::vector<std::uint16_t>(batch.q_elements()),
                      std::vector<std::uint32_t>(fresh.lse.size())};
    o.download(again.o.data(), o.bytes());
    lse.download(again.lse.data(), lse.bytes());
    INFO("run " << run + 1 << " of one launch");
    CHECK(again.o == fresh.o);
    CHECK(again.lse == fresh.lse);
  }
}

TEST_CASE("NaN in the KV cache past a sequence's last key reaches no row", "[gpu][attention]") {
  // A serving engine's cache holds whatever its freed or unwritten rows held after a sequence's
  // last key, NaN among it. Masked keys have p = 0, but 0 times NaN is NaN: every forward path has
  // to zero (or never read) the values past a CTA's last query. Here each sequence's keys are
  // followed by 64 NaN rows, and every row must keep the bits it has with the keys back to back.
  const int gap = 64;
  struct Kernel {
    cuda::AttentionForwardKernel kernel;
    const char* name;
    bool needs_sm90, head_dim_128_only;
  };
  const Kernel kernels[] = {
      {cuda::AttentionForwardKernel::automatic, "automatic", false, false},
      {cuda::AttentionForwardKernel::wgmma_synchronous, "wgmma synchronous", true, false},
      {cuda::AttentionForwardKernel::warp_specialized_unchunked, "warp-specialized unchunked", true,
       true},
      {cuda::AttentionForwardKernel::mma_sync, "mma.sync", false, false}};
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      const ForwardBatch batch(dtype, 8, 2, head_dim, edge_lengths, 31);
      // The gapped cache: sequence s at bases[s], then `gap` rows of all-ones bits (NaN).
      const std::size_t row = static_cast<std::size_t>(batch.shape.kv_heads) * head_dim;
      KvCacheView view{nullptr, nullptr, 0, {}};
      for (int length : batch.lengths) {
        view.bases.push_back(static_cast<int>(view.cache_rows));
        view.cache_rows += length + gap;
      }
      std::vector<std::uint16_t> k_host(static_cast<std::size_t>(batch.slots) * row),
          v_host(k_host.size());
      batch.k.download(k_host.data(), batch.k.bytes());
      batch.v.download(v_host.data(), batch.v.bytes());
      std::vector<std::uint16_t> k_gapped(static_cast<std::size_t>(view.cache_rows) * row, 0xFFFF),
          v_gapped(k_gapped.size(), 0xFFFF);
      for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
        const auto from =
            static_cast<std::ptrdiff_t>(static_cast<std::size_t>(batch.offsets[s]) * row);
        const auto count =
            static_cast<std::ptrdiff_t>(static_cast<std::size_t>(batch.lengths[s]) * row);
        const auto to = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(view.bases[s]) * row);
        std::copy(k_host.begin() + from, k_host.begin() + from + count, k_gapped.begin() + to);
        std::copy(v_host.begin() + from, v_host.begin() + from + count, v_gapped.begin() + to);
      }
      const cuda::DeviceBuffer k = upload_halves(k_gapped), v = upload_halves(v_gapped);
      view.k = &k;
      view.v = &v;
      for (const Kernel& kernel : kernels) {
        if (kernel.needs_sm90 && !cuda::attention_forward_uses_wgmma()) continue;
        if (kernel.head_dim_128_only && head_dim != 128) continue;
        for (const auto& [layout, launches] : layout_launches(batch)) {
          INFO(to_string(dtype) << " D=" << head_dim << " " << kernel.name << ", " << layout);
          const ForwardBits together = run_launches(batch, launches, kernel.kernel);
          const ForwardBits gapped = run_launches(batch, launches, kernel.kernel,
                                                  cuda::AttentionSchedule::automatic, &view);
          const RowComparison rows = compare_rows(batch, gapped, together);
          CHECK(rows.unwritten == 0);
          CHECK(rows.differ_first_chunk == 0);
          CHECK(rows.differ_later == 0);
        }
      }
      // The check can fail: a NaN inside a sequence's keys (its last value row, position 1299)
      // reaches that row and, through 0 times NaN, the other rows of its block's CTA.
      std::vector<std::uint16_t> poisoned = v_gapped;
      const std::size_t last =
          static_cast<std::size_t>(view.bases.back() + batch.lengths.back() - 1) * row;
      std::fill(poisoned.begin() + static_cast<std::ptrdiff_t>(last),
                poisoned.begin() + static_cast<std::ptrdiff_t>(last + row), 0xFFFF);
      const cuda::DeviceBuffer v_poisoned = upload_halves(poisoned);
      KvCacheView broken = view;
      broken.v = &v_poisoned;
      const Launches prefill = chunked_launches(batch, 0);
      const RowComparison leaked =
          compare_rows(batch,
                       run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic,
                                    cuda::AttentionSchedule::automatic, &broken),
                       run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic));
      CHECK(leaked.differ_later > 0);
    }
  }
}

TEST_CASE("the forward's epilogue division gives the bits of __fdiv_rn", "[gpu][attention]") {
  // o = acc / l in every forward kernel: a reciprocal per row, then the quotient and correction
  // nvcc emits for __fdiv_rn without its range check. 2^28 random pairs per seed, l in [1/2, 2^24),
  // |acc| in [2^-90, 2^100) or +-0.
  const std::int64_t pairs = std::int64_t{1} << 28;
  CHECK(cuda::attention_division_mismatches(pairs, 1, false) == 0);
  CHECK(cuda::attention_division_mismatches(pairs, 2, false) == 0);
  // The comparison can fail: acc times a correctly rounded 1 / l differs now and then.
  CHECK(cuda::attention_division_mismatches(pairs, 1, true) > 0);
}

TEST_CASE("attention wgmma forward agrees with the mma.sync forward", "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) {
    WARN(
        "not an sm_90 device (or BITCHECK_ATTENTION_FORWARD=mma-sync): the forward runs on "
        "mma.sync only");
    return;
  }
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      const ForwardBatch batch(dtype, 8, 2, head_dim, {1, 63, 64, 65, 200, 300}, 5);
      const Launches prefill = chunked_launches(batch, 0);
      const ForwardBits wgmma =
          run_launches(batch, prefill, cuda::AttentionForwardKernel::automatic);
      const ForwardBits mma_sync =
          run_launches(batch, prefill, cuda::AttentionForwardKernel::mma_sync);
      INFO(to_string(dtype) << " D=" << head_dim);
      // Both round P to the dtype for P·V and keep S and O in fp32; they differ in the tensor
      // cores' internal summation order only.
      const double tolerance = dtype == DType::bf16 ? 2e-2 : 4e-3;
      const RowComparison rows = compare_rows(batch, wgmma, mma_sync);
      CHECK(rows.unwritten == 0);
      CHECK(rows.max_relative_diff < tolerance);
      ForwardBits shifted = wgmma;  // the check can fail: rows moved by one element
      std::rotate(shifted.o.begin(), shifted.o.begin() + 1, shifted.o.end());
      CHECK(compare_rows(batch, shifted, mma_sync).max_relative_diff > tolerance);
    }
  }
}

TEST_CASE("attention tensor-core backward agrees with the SIMT backward", "[gpu][attention]") {
  const bool hopper =
      cuda::attention_backward_device_kernel() == cuda::AttentionBackwardKernel::wgmma;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    // P and dS enter the mma rounded to the dtype; the SIMT path keeps them in fp32.
    const double tolerance = dtype == DType::bf16 ? 3e-2 : 1e-2;
    for (int head_dim : {64, 128}) {
      const BackwardGradients simt = run_backward_paths(dtype, head_dim, BackwardKernel::simt);
      for (BackwardKernel kernel : {BackwardKernel::mma_sync, BackwardKernel::wgmma}) {
        if (kernel == BackwardKernel::wgmma && !hopper) continue;
        const BackwardGradients mma = run_backward_paths(dtype, head_dim, kernel);
        INFO(to_string(dtype) << " D=" << head_dim
                              << (kernel == BackwardKernel::wgmma ? " wgmma" : " mma.sync"));
        CHECK(relative_max_abs_diff(mma.dq, simt.dq) < tolerance);
        CHECK(relative_max_abs_diff(mma.dk, simt.dk) < tolerance);
        CHECK(relative_max_abs_diff(mma.dv, simt.dv) < tolerance);
        CHECK(relative_max_abs_diff(mma.dk, simt.dv) >
              tolerance);  // the check can fail: dk is not dv
      }
    }
  }
}

// How many elements of a and b differ in their bits (as the dtype's values widened to float).
std::size_t differing_bits(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    differing += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return differing;
}

// The wgmma backward against the mma.sync one it replaces on sm_90: the same sums in the same
// order on different MMA instructions.
TEST_CASE("attention wgmma backward against the mma.sync backward, bit for bit",
          "[gpu][attention]") {
  if (cuda::attention_backward_device_kernel() != cuda::AttentionBackwardKernel::wgmma) {
    WARN("the wgmma backward runs on sm_90 only: not checked on this GPU");
    return;
  }
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      const BackwardGradients mma = run_backward_paths(dtype, head_dim, BackwardKernel::mma_sync);
      const BackwardGradients wgmma = run_backward_paths(dtype, head_dim, BackwardKernel::wgmma);
      INFO(to_string(dtype) << " D=" << head_dim << ": dq " << differing_bits(wgmma.dq, mma.dq)
                            << ", dk " << differing_bits(wgmma.dk, mma.dk) << ", dv "
                            << differing_bits(wgmma.dv, mma.dv) << " of " << wgmma.dq.size() << "/"
                            << wgmma.dk.size() << " elements differ");
      CHECK(differing_bits(wgmma.dq, mma.dq) == 0);
      CHECK(differing_bits(wgmma.dk, mma.dk) == 0);
      CHECK(differing_bits(wgmma.dv, mma.dv) == 0);
    }
  }
}

TEST_CASE("attention fixed-order CUDA passes every sequence layout", "[gpu][attention]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (std::int64_t head_dim : {64, 128}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        CaseResult result = run_attention("fixed-order", dtype, pass, head_dim, 4);
        INFO(to_string(dtype) << " D=" << head_dim << " " << to_string(pass) << ": "
                              << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("each attention CUDA control drifts", "[gpu][attention][control]") {
  struct Control {
    const char* impl;
    Pass pass;
  };
  for (Control control :
       {Control{"split-kv-by-batch", Pass::forward}, Control{"kv-block-by-length", Pass::forward},
        Control{"atomic-dq", Pass::backward}}) {
    CaseResult result = run_attention(control.impl, DType::bf16, control.pass, 128, 4);
    INFO(control.impl << ": " << describe(result));
    CHECK((result.verdict == Verdict::drift || result.verdict == Verdict::nondeterministic));
  }
}
