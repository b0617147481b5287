// Host planning of the attention kernels: the launch paths they declare (attention_paths), the
// choice of kernel by device, dtype, head dim and launch shape with the path each call records, the
// tiles and work orders of the tensor-core launches, and AttentionForwardLaunch, the plan of every
// tensor-core forward launch. No kernels: each family's file launches its own
// (attention_launchers.h). Every choice made here (kernel per device, launch shape, tile order,
// CTAs per SM) is scheduling, which the kernels' files show changes no bit of a row, except the
// controls' splits and atomics, which are chosen from the batch on purpose.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/cuda_check.cuh"
#include "core/paths.h"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

// Whether the current device is sm_90 (the wgmma kernels' cubin), per device and cached. No
// device at all (a machine without a GPU, or none visible) is not sm_90: a sweep still plans its
// switch points there, and every case of the CUDA backend is skipped as unavailable.
bool device_is_sm90() {
  static bool cached[16] = {};
  static bool known[16] = {};
  static std::mutex mutex;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    return false;
  }
  if (device < 0 || device >= 16) throw std::runtime_error("attention: device index >= 16");
  std::lock_guard<std::mutex> lock(mutex);
  if (!known[device]) {
    cudaDeviceProp prop{};
    BITCHECK_CUDA_CALL(cudaGetDeviceProperties(&prop, device));
    cached[device] = prop.major == 9 && prop.minor == 0;
    known[device] = true;
  }
  return cached[device];
}

bool environment_is(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set && std::string(set) == value;
}

// Launch shapes of the wgmma forward, a per-launch scheduling choice (no bit depends on it):
// prefill (some tile longer than 16 queries) by the producer-warpgroup kernel, one head per CTA;
// decode-like launches on 4 stages, since one CTA streams a sequence's whole cache, and with the
// heads of a KV group packed into one CTA when that still leaves at least 64 CTAs with work (fewer
// CTAs would leave SMs idle while each streams its cache).
struct WgmmaForwardPlan {
  bool decode_like;
  bool pack_heads;
};
WgmmaForwardPlan plan_wgmma_forward(int tile_count, int longest_tile, AttentionShape shape) {
  const int group = shape.heads / shape.kv_heads;
  const bool decode_like = longest_tile <= 16;
  const bool packable = (group == 2 || group == 4 || group == 8) &&
                        longest_tile <= attention_mma_tile_queries / group;
  return {decode_like,
          decode_like && packable && static_cast<std::int64_t>(tile_count) * shape.kv_heads >= 64};
}

// Whether prefill CTAs run their consumer warpgroups in ping-pong (measured on an H200 at head
// dim 128: within 1-2 % of the cooperative schedule, ahead at every length).
bool pingpong_schedule(AttentionSchedule schedule) {
  static const char* forced = std::getenv("BITCHECK_ATTENTION_SCHEDULE");
  if (schedule == AttentionSchedule::automatic && forced) {
    if (std::string(forced) == "pingpong") return true;
    if (std::string(forced) == "cooperative") return false;
  }
  return schedule != AttentionSchedule::cooperative;
}

// Whether a decode launch of `ctas` CTAs runs one CTA per SM on 4 stages rather than two
// on 2 each: where it has no more CTAs than the device has SMs (measured in
// reports/gpu/attention/: a decode step at 1 x 8192 keys, 128 CTAs). Scheduling only.
bool decode_one_per_sm(AttentionSchedule schedule, std::int64_t ctas) {
  if (schedule == AttentionSchedule::decode_one_per_sm) return true;
  if (schedule == AttentionSchedule::decode_two_per_sm) return false;
  static const char* forced = std::getenv("BITCHECK_ATTENTION_DECODE_CTAS");
  if (forced && std::string(forced) == "one-per-sm") return true;
  if (forced && std::string(forced) == "two-per-sm") return false;
  return ctas <= attention_multiprocessor_count();
}

}  // namespace

std::vector<PathDecl> attention_paths(int kind) {
  const PathDecl prefill("forward.wgmma.prefill",
                         "warp-specialized wgmma forward (head dim 128): a TMA producer warp, two "
                         "consumer warpgroups in ping-pong on the same K/V blocks, 2048-key chunks "
                         "merged in order");
  const PathDecl cooperative =
      PathDecl("forward.wgmma.prefill.cooperative",
               "the same with the two consumer warpgroups issuing as soon as their operands are "
               "there")
          .only_forced();
  const PathDecl sections =
      PathDecl("forward.wgmma.prefill.l2-sections",
               "ping-pong with the work items in sections of one (sequence, KV head) pair, the "
               "order batches with more than 16 MiB of K/V take, at any batch")
          .only_forced();
  const PathDecl decode(
      "forward.wgmma.decode",
      "decode-like launches (tiles of <= 16 queries) at head dim 128: one "
      "consumer warpgroup and a head per CTA, every row within one 2048-key chunk");
  const PathDecl decode_split("forward.wgmma.decode.split-kv",
                              "decode-like, a head per CTA, a CTA per 2048-key chunk, the chunks "
                              "merged in order by a second kernel");
  const PathDecl packed("forward.wgmma.decode.packed-heads",
                        "decode-like with a KV group's heads in one CTA (>= 64 CTAs of work), "
                        "every row within one 2048-key chunk");
  const PathDecl packed_split("forward.wgmma.decode.packed-heads.split-kv",
                              "decode-like with a KV group's heads in one CTA, a CTA per 2048-key "
                              "chunk, merged in order by a second kernel");
  const PathDecl one_per_sm =
      PathDecl("forward.wgmma.decode-ctas.one-per-sm",
               "a head-dim-128 decode launch with no more CTAs than SMs (one sequence, or few): "
               "one CTA per SM, 4 K/V stages, the next block's Q·Kᵀ issued under the softmax")
          .forceable();
  const PathDecl two_per_sm =
      PathDecl("forward.wgmma.decode-ctas.two-per-sm",
               "a head-dim-128 decode launch with more CTAs than SMs: two CTAs per SM, 2 K/V "
               "stages each")
          .forceable();
  const PathDecl synchronous_prefill("forward.wgmma.synchronous.prefill",
                                     "head dim 64 on sm_90: the synchronous wgmma kernel (cp.async "
                                     "loads, two CTAs of two warpgroups per SM), no chunks");
  const PathDecl synchronous_decode("forward.wgmma.synchronous.decode",
                                    "head dim 64, decode-like launches, a head per CTA");
  const PathDecl synchronous_packed("forward.wgmma.synchronous.decode.packed-heads",
                                    "head dim 64, decode-like with a KV group's heads in one CTA");
  const PathDecl mma_sync =
      PathDecl("forward.mma-sync", "mma.sync forward (GPUs before sm_90)").only_forced();
  const PathDecl simt("forward.simt", "SIMT forward (fp32, head dims other than 64 and 128)");
  const PathDecl backward_wgmma(
      "backward.wgmma",
      "wgmma backward on sm_90, head dim 64: a warpgroup per 64-row tile, dq per query tile over "
      "key blocks in order, dk/dv per key tile over query blocks in order");
  const PathDecl backward_wgmma_paired(
      "backward.wgmma.paired",
      "wgmma backward on sm_90, head dim 128: the same sums, two warpgroups per CTA on two 64-row "
      "tiles sharing each streamed block");
  const PathDecl backward_mma =
      PathDecl("backward.mma", "mma.sync backward (GPUs before sm_90): dq per query, dk/dv per key")
          .only_forced();
  const PathDecl backward_simt("backward.simt", "SIMT backward (fp32, other head dims)");
  const std::vector<PathDecl> forward_wgmma = {prefill,
                                               cooperative,
                                               sections,
                                               decode,
                                               decode_split,
                                               packed,
                                               packed_split,
                                               one_per_sm,
                                               two_per_sm,
                                               synchronous_prefill,
                                               synchronous_decode,
                                               synchronous_packed};
  switch (kind) {
    case 0: {
      std::vector<PathDecl> paths = forward_wgmma;
      for (const PathDecl& path :
           {mma_sync, simt, backward_wgmma, backward_wgmma_paired, backward_mma, backward_simt})
        paths.push_back(path);
      return paths;
    }
    case 1:
      return {PathDecl("forward.simt.split-kv", "split-KV SIMT forward, splits set by the batch"),
              simt};
    case 2:
      return {simt};
    default: {
      std::vector<PathDecl> paths = {
          PathDecl("backward.simt.atomic-dq", "dq from per-block partials added atomically")};
      for (PathDecl path : forward_wgmma) paths.push_back(path.informative());
      paths.push_back(PathDecl(simt).informative());
      return paths;
    }
  }
}

std::int64_t attention_packed_heads_sequences(AttentionShape shape) {
  const int group = shape.kv_heads > 0 ? shape.heads / shape.kv_heads : 0;
  // The warp-specialized decode (head dim 128) packs groups of 2 and 4 into its 64 rows, the
  // synchronous kernel (head dim 64) groups of 2, 4 and 8 into its 128.
  const bool synchronous = !attention_warp_specialized_dim(shape.dim);
  if (group != 2 && group != 4 && !(synchronous && group == 8)) return 0;
  return (64 + shape.kv_heads - 1) / shape.kv_heads;
}

// Queried once per device: a decode layout plans a launch per step.
int attention_multiprocessor_count() {
  static std::mutex mutex;
  static std::map<int, int> counts;
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto [entry, inserted] = counts.try_emplace(device, 0);
  if (inserted) {
    BITCHECK_CUDA_CALL(
        cudaDeviceGetAttribute(&entry->second, cudaDevAttrMultiProcessorCount, device));
  }
  return entry->second;
}

bool attention_forward_uses_wgmma() {
  // Per device: the path must not flip between calls. BITCHECK_ATTENTION_FORWARD=mma-sync forces
  // the mma.sync kernel on Hopper too, to bisect a forward drift between the two paths.
  static const bool mma_sync = environment_is("BITCHECK_ATTENTION_FORWARD", "mma-sync");
  return device_is_sm90() && !mma_sync;
}

AttentionBackwardKernel attention_backward_device_kernel() {
  // BITCHECK_ATTENTION_BACKWARD=mma-sync forces the mma.sync kernels on Hopper too, to bisect a
  // backward drift between the two paths.
  static const bool mma_sync = environment_is("BITCHECK_ATTENTION_BACKWARD", "mma-sync");
  return device_is_sm90() && !mma_sync ? AttentionBackwardKernel::wgmma
                                       : AttentionBackwardKernel::mma_sync;
}

int attention_backward_tile_rows(AttentionBackwardKernel kernel, int dim) {
  if (kernel == AttentionBackwardKernel::automatic) kernel = attention_backward_device_kernel();
  return kernel == AttentionBackwardKernel::wgmma && dim == 128 ? attention_backward_pair_tile
                                                                : attention_mma_backward_tile;
}

void attention_forward_mma(DeviceDType dtype, const void* q, const void* k_cache,
                           const void* v_cache, void* o, float* lse, const AttentionTile* tiles,
                           int tile_count, std::int64_t cache_rows, AttentionShape shape,
                           CUstream_st* stream, bool force_mma_sync, int longest_tile) {
  if (tile_count <= 0) return;
  if (dtype == DeviceDType::fp32 || (shape.dim != 64 && shape.dim != 128)) {
    throw std::invalid_argument("attention_forward_mma: bf16/fp16 with head dim 64 or 128 only");
  }
  if (!force_mma_sync && attention_forward_uses_wgmma()) {
    const WgmmaForwardPlan plan = plan_wgmma_forward(tile_count, longest_tile, shape);
    record_path(plan.pack_heads    ? "forward.wgmma.synchronous.decode.packed-heads"
                : plan.decode_like ? "forward.wgmma.synchronous.decode"
                                   : "forward.wgmma.synchronous.prefill");
    launch_forward_wgmma_synchronous(dtype, q, k_cache, v_cache, o, lse, tiles, tile_count,
                                     cache_rows, shape, plan.decode_like, plan.pack_heads, stream);
    return;
  }
  record_path("forward.mma-sync");
  launch_forward_mma_sync(dtype, q, k_cache, v_cache, o, lse, tiles, tile_count, shape, stream);
}

void attention_forward_simt(DeviceDType dtype, const void* q, const void* k_cache,
                            const void* v_cache, void* o, float* lse, const AttentionToken* tokens,
                            int token_count, AttentionShape shape, int kv_block, int splits,
                            float* scratch, CUstream_st* stream) {
  if (token_count <= 0) return;
  if (shape.dim > simt_max_dim || kv_block % warp_size || kv_block > simt_max_dim || splits < 1 ||
      (splits > 1 && !scratch)) {
    throw std::invalid_argument(
        "attention_forward_simt: dim <= 128, kv_block a multiple of 32 up to 128, scratch for "
        "splits");
  }
  record_path(splits > 1 ? "forward.simt.split-kv" : "forward.simt");
  launch_forward_simt(dtype, q, k_cache, v_cache, o, lse, tokens, token_count, shape, kv_block,
                      splits, scratch, stream);
  if (splits > 1)
    launch_combine_splits(dtype, scratch, o, lse, tokens, token_count, shape, splits, stream);
}

void attention_backward(DeviceDType dtype, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* dout, float* delta, void* dq,
                        void* dk, void* dv, const AttentionToken* tokens, int token_count,
                        int max_position, AttentionShape shape, float* dq_atomic_scratch,
                        CUstream_st* stream) {
  if (token_count <= 0) return;
  if (shape.dim > simt_max_dim) throw std::invalid_argument("attention_backward: dim <= 128");
  const int blocks_per_query = dq_atomic_scratch ? max_position / attention_mma_kv_block + 1 : 1;
  record_path(dq_atomic_scratch ? "backward.simt.atomic-dq" : "backward.simt");
  launch_backward_delta(dtype, o, dout, delta, tokens, token_count, shape, stream);
  launch_backward_simt(dtype, q, k, v, lse, dout, delta, dq, dk, dv, tokens, token_count, shape,
                       blocks_per_query, dq_atomic_scratch, stream);
}

AttentionBackwardTileLists attention_backward_tiles(const std::vector<int>& first_slots,
                                                    const std::vector<int>& lengths, int rows) {
  if (first_slots.size() != lengths.size() || rows <= 0)
    throw std::invalid_argument("attention_backward_tiles: one first slot per length, rows > 0");
  AttentionBackwardTileLists tiles;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    for (int i = 0; i < lengths[s]; i += rows) {
      tiles.queries.push_back(
          {first_slots[s] + i, std::min(rows, lengths[s] - i), i, first_slots[s], lengths[s]});
    }
  }
  tiles.keys = tiles.queries;
  std::stable_sort(tiles.queries.begin(), tiles.queries.end(),
                   [](const AttentionBackwardTile& a, const AttentionBackwardTile& b) {
                     return a.start_position > b.start_position;
                   });
  std::stable_sort(tiles.keys.begin(), tiles.keys.end(),
                   [](const AttentionBackwardTile& a, const AttentionBackwardTile& b) {
                     return a.sequence_length - a.start_position >
                            b.sequence_length - b.start_position;
                   });
  return tiles;
}

std::int64_t attention_l2_budget() {
  static const std::int64_t mib = [] {
    const char* forced = std::getenv("BITCHECK_ATTENTION_L2_MIB");
    if (!forced) return std::int64_t{16};
    char* end = nullptr;
    const long long value = std::strtoll(forced, &end, 10);
    if (*forced == '\0' || *end != '\0' || value < 0 || value > (1 << 20))
      throw std::invalid_argument(std::string("BITCHECK_ATTENTION_L2_MIB: expected a whole number "
                                              "of MiB from 0 to 1048576, got '") +
                                  forced + "'");
    return static_cast<std::int64_t>(value);
  }();
  return mib << 20;
}

std::vector<int> attention_prefill_order(const std::vector<AttentionTile>& tiles, int heads,
                                         int kv_heads, std::int64_t kv_row_bytes,
                                         std::int64_t budget_bytes) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("attention_prefill_order: heads must be a multiple of kv heads");
  const int group = heads / kv_heads;
  const auto end_of = [&](int t) {
    return tiles[static_cast<std::size_t>(t)].start_position +
           tiles[static_cast<std::size_t>(t)].count;
  };
  std::vector<int> by_length(tiles.size());
  for (std::size_t t = 0; t < tiles.size(); ++t) by_length[t] = static_cast<int>(t);
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int a, int b) { return end_of(a) > end_of(b); });
  std::vector<int> order;
  order.reserve(tiles.size() * static_cast<std::size_t>(heads));
  if (budget_bytes <= 0) {
    for (int t : by_length)
      for (int h = 0; h < heads; ++h) order.push_back(t * heads + h);
    return order;
  }
  // Sequences (cache bases) in the order of their longest tile, whose end gives a pair's bytes.
  std::vector<int> bases;
  std::vector<std::int64_t> pair_bytes;
  std::unordered_set<int> seen;
  for (int t : by_length) {
    if (!seen.insert(tiles[static_cast<std::size_t>(t)].cache_base).second) continue;
    bases.push_back(tiles[static_cast<std::size_t>(t)].cache_base);
    pair_bytes.push_back(static_cast<std::int64_t>(end_of(t)) * kv_row_bytes);
  }
  // A section: per sequence, the KV heads [first, end) of its pairs in the section.
  std::map<int, std::pair<int, int>> section;
  std::int64_t section_bytes = 0;
  const auto flush = [&] {
    for (int t : by_length) {
      const auto pairs = section.find(tiles[static_cast<std::size_t>(t)].cache_base);
      if (pairs == section.end()) continue;
      for (int h = pairs->second.first * group; h < pairs->second.second * group; ++h)
        order.push_back(t * heads + h);
    }
    section.clear();
    section_bytes = 0;
  };
  for (std::size_t s = 0; s < bases.size(); ++s) {
    for (int g = 0; g < kv_heads; ++g) {
      if (!section.empty() && section_bytes + pair_bytes[s] > budget_bytes) flush();
      section.try_emplace(bases[s], g, g).first->second.second = g + 1;
      section_bytes += pair_bytes[s];
    }
  }
  if (!section.empty()) flush();
  return order;
}

void attention_backward_mma(DeviceDType dtype, const void* q, const void* k, const void* v,
                            const void* o, const float* lse, const void* dout, float* delta,
                            void* dq, void* dk, void* dv, const AttentionToken* tokens,
                            int token_count, const AttentionBackwardTiles& tiles,
                            AttentionShape shape, CUstream_st* stream,
                            AttentionBackwardKernel kernel) {
  if (token_count <= 0) return;
  if (dtype == DeviceDType::fp32 || (shape.dim != 64 && shape.dim != 128)) {
    throw std::invalid_argument("attention_backward_mma: bf16/fp16 with head dim 64 or 128 only");
  }
  if (kernel == AttentionBackwardKernel::automatic) kernel = attention_backward_device_kernel();
  if (kernel == AttentionBackwardKernel::wgmma && !device_is_sm90())
    throw std::invalid_argument("attention_backward_mma: the wgmma kernels need an sm_90 device");
  const bool wgmma = kernel == AttentionBackwardKernel::wgmma;
  if (tiles.rows != attention_backward_tile_rows(kernel, shape.dim))
    throw std::invalid_argument("attention_backward_mma: tiles of " + std::to_string(tiles.rows) +
                                " rows; this kernel takes attention_backward_tile_rows");
  if (tiles.count <= 0) return;
  record_path(!wgmma                                       ? "backward.mma"
              : tiles.rows == attention_backward_pair_tile ? "backward.wgmma.paired"
                                                           : "backward.wgmma");
  launch_backward_delta(dtype, o, dout, delta, tokens, token_count, shape, stream);
  if (wgmma) {
    launch_backward_wgmma(dtype, q, k, v, lse, dout, delta, dq, dk, dv, tiles, shape, stream);
    return;
  }
  launch_backward_mma_sync(dtype, q, k, v, lse, dout, delta, dq, dk, dv, tiles, shape, stream);
}

AttentionForwardLaunch::AttentionForwardLaunch(DeviceDType dtype, AttentionShape shape,
                                               const std::vector<AttentionTile>& tiles,
                                               std::int64_t cache_rows,
                                               AttentionForwardKernel kernel,
                                               AttentionSchedule schedule)
    : dtype_(dtype), shape_(shape), cache_rows_(cache_rows) {
  if (dtype == DeviceDType::fp32 || (shape.dim != 64 && shape.dim != 128))
    throw std::invalid_argument("attention forward: bf16/fp16 with head dim 64 or 128 only");
  if (shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0)
    throw std::invalid_argument("attention forward: heads must be a multiple of kv heads");
  tile_count_ = static_cast<int>(tiles.size());
  for (const AttentionTile& tile : tiles) {
    longest_tile_ = std::max(longest_tile_, tile.count);
    query_rows_ = std::max<std::int64_t>(query_rows_, tile.first_slot + tile.count);
  }
  if (kernel == AttentionForwardKernel::automatic && !attention_forward_uses_wgmma())
    kernel = AttentionForwardKernel::mma_sync;
  // Head dim 64 keeps the synchronous kernel, whose two CTAs of two warpgroups per SM outran the
  // warp-specialized kernel's one CTA of two (measured on an H200: 0.93x against 0.72x of SDPA at
  // L = 2048): its softmax, which the products no longer dwarf at D = 64, needs the warps.
  if (kernel == AttentionForwardKernel::automatic && !attention_warp_specialized_dim(shape.dim))
    kernel = AttentionForwardKernel::wgmma_synchronous;
  if (kernel == AttentionForwardKernel::warp_specialized_unchunked &&
      !attention_warp_specialized_dim(shape.dim))
    throw std::invalid_argument("attention forward: the warp-specialized kernels are head dim 128");
  kernel_ = kernel;
  if (!tiles.empty()) {
    tiles_ = DeviceBuffer(tiles.size() * sizeof(AttentionTile));
    tiles_.upload(tiles.data(), tiles_.bytes());
  }
  if (kernel == AttentionForwardKernel::mma_sync) {
    path_ = "forward.mma-sync";
    return;
  }
  if (kernel == AttentionForwardKernel::wgmma_synchronous) {
    path_ = "forward.wgmma.synchronous";
    return;
  }
  const bool chunked = kernel == AttentionForwardKernel::automatic;
  chunked_ = chunked;
  const int group = shape.heads / shape.kv_heads;
  // Decode-like launches (no tile longer than 16 queries) run one consumer warpgroup per CTA, two
  // CTAs per SM, chunk by chunk; prefill runs two consumer warpgroups on the same K/V blocks.
  decode_ = longest_tile_ <= 16;
  if (!decode_) {
    pingpong_ = pingpong_schedule(schedule);
    next_item_ = DeviceBuffer(sizeof(int));  // the persistent CTAs' work counter, 0 between runs
    next_item_.fill_bytes(0);
    const bool sections = schedule == AttentionSchedule::l2_sections;
    const std::int64_t kv_row_bytes = 2 * static_cast<std::int64_t>(shape.dim) * 2;  // K and V
    const std::vector<int> order = attention_prefill_order(
        tiles, shape.heads, shape.kv_heads, kv_row_bytes, sections ? 1 : attention_l2_budget());
    // Every item exactly once: an item missed would leave rows unwritten, one repeated would race.
    std::vector<char> seen(tiles.size() * static_cast<std::size_t>(shape.heads), 0);
    for (int item : order) {
      if (item < 0 || static_cast<std::size_t>(item) >= seen.size() ||
          seen[static_cast<std::size_t>(item)]++)
        throw std::logic_error("attention forward: the prefill order repeats or misses an item");
    }
    if (order.size() != seen.size())
      throw std::logic_error("attention forward: the prefill order repeats or misses an item");
    order_ = DeviceBuffer(order.size() * sizeof(int));
    order_.upload(order.data(), order_.bytes());
    path_ = chunked ? std::string("forward.wgmma.prefill") +
                          (pingpong_ ? (sections ? ".l2-sections" : "") : ".cooperative")
                    : "forward.wgmma.unchunked";
    return;
  }
  std::int64_t chunk_items = 0;
  for (const AttentionTile& tile : tiles) {
    const std::int64_t chunks =
        chunked ? attention_forward_chunks(tile.start_position + tile.count - 1) : 1;
    splits_ = std::max<int>(splits_, static_cast<int>(chunks));
    chunk_items += chunks;
  }
  // A KV group's heads share the CTA (and each K/V block it loads) when 64 rows hold all their
  // queries and that still leaves at least 64 CTAs with work.
  pack_ = (group == 2 || group == 4) && longest_tile_ <= 64 / group &&
                  chunk_items * shape.kv_heads >= 64
              ? group
              : 1;
  if (!chunked) {
    path_ = "forward.wgmma.unchunked";
    return;
  }
  std::vector<AttentionWorkItem> items;
  std::vector<AttentionMergeTask> tasks;
  std::int64_t partials = 0;
  for (int t = 0; t < tile_count_; ++t) {
    const AttentionTile& tile = tiles[static_cast<std::size_t>(t)];
    const auto chunks =
        static_cast<int>(attention_forward_chunks(tile.start_position + tile.count - 1));
    const std::int64_t base = chunks > 1 ? partials : -1;
    for (int c = 0; c < chunks; ++c) items.push_back({t, c, base});
    if (chunks > 1) {
      tasks.push_back({t, base});
      partials += static_cast<std::int64_t>(chunks) * shape.heads * tile.count;
    }
  }
  // Longest tiles' items first would not shorten a decode step: every item is at most one chunk.
  item_count_ = static_cast<int>(items.size());
  merge_task_count_ = static_cast<int>(tasks.size());
  items_ = DeviceBuffer(items.size() * sizeof(AttentionWorkItem));
  items_.upload(items.data(), items_.bytes());
  if (!tasks.empty()) {
    merge_tasks_ = DeviceBuffer(tasks.size() * sizeof(AttentionMergeTask));
    merge_tasks_.upload(tasks.data(), merge_tasks_.bytes());
    partials_ = DeviceBuffer(static_cast<std::size_t>(partials) * (shape.dim + 2) * sizeof(float));
  }
  path_ = std::string("forward.wgmma.decode") + (pack_ > 1 ? ".packed-heads" : "") +
          (tasks.empty() ? "" : ".split-kv");
  const std::int64_t ctas =
      static_cast<std::int64_t>(item_count_) * (pack_ > 1 ? shape.kv_heads : shape.heads);
  ctas_per_sm_ = decode_one_per_sm(schedule, ctas) ? 1 : 2;
}

AttentionForwardLaunch::~AttentionForwardLaunch() = default;

void AttentionForwardLaunch::run(const void* q, const void* k_cache, const void* v_cache, void* o,
                                 float* lse, CUstream_st* stream) const {
  if (tile_count_ == 0) return;
  if (kernel_ == AttentionForwardKernel::mma_sync ||
      kernel_ == AttentionForwardKernel::wgmma_synchronous) {  // they record their paths
    attention_forward_mma(dtype_, q, k_cache, v_cache, o, lse, tiles_.as<AttentionTile>(),
                          tile_count_, cache_rows_, shape_, stream,
                          kernel_ == AttentionForwardKernel::mma_sync, longest_tile_);
    return;
  }
  record_path(path_);
  if (ctas_per_sm_ > 0) {
    record_path(ctas_per_sm_ == 1 ? "forward.wgmma.decode-ctas.one-per-sm"
                                  : "forward.wgmma.decode-ctas.two-per-sm");
  }
  const AttentionWsLaunch launch{dtype_,
                                 shape_,
                                 q,
                                 k_cache,
                                 v_cache,
                                 o,
                                 lse,
                                 cache_rows_,
                                 query_rows_,
                                 tiles_.as<AttentionTile>(),
                                 tile_count_,
                                 items_.as<AttentionWorkItem>(),
                                 item_count_,
                                 order_.as<int>(),
                                 partials_.as<float>(),
                                 next_item_.as<int>(),
                                 decode_,
                                 chunked_,
                                 pack_,
                                 pingpong_,
                                 ctas_per_sm_};
  if (decode_) {
    launch_forward_ws_decode(launch, stream);
  } else {
    launch_forward_ws_prefill(launch, stream);
  }
  if (merge_task_count_ == 0) return;  // only split decode launches have merge tasks
  // Decode-like tiles hold at most 16 queries.
  launch_merge_chunks(dtype_, partials_.as<float>(), o, lse, tiles_.as<AttentionTile>(),
                      merge_tasks_.as<AttentionMergeTask>(), merge_task_count_, 16, shape_, stream);
}

}  // namespace bitcheck::cuda
