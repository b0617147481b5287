// The synchronous wgmma attention forward (sm_90a; bf16/fp16, head dim 64 or 128): on sm_90 the
// kernels of head dim 64, and at head dim 128 the bits the warp-specialized kernels give without
// chunks. attention_forward_mma (attention_plan.cu) picks the launch shape (plan_wgmma_forward) and
// records the path.
//
// Kernels:
//   forward_wgmma_kernel<T, D, 4, false>   decode-like launches (no tile over 16 queries), a head
//                                          per CTA: forward.wgmma.synchronous.decode
//   forward_wgmma_kernel<T, D, 4, true>    decode-like, the heads of a KV group in one CTA:
//                                          forward.wgmma.synchronous.decode.packed-heads
//   forward_wgmma_producer_kernel<T, D, 4> prefill, K/V by TMA from a producer warpgroup:
//                                          forward.wgmma.synchronous.prefill
//
// Why a row's bits do not depend on batch, position in the batch, padding, chunking or decode: it
// reduces its keys in 64-key blocks aligned to position 0 of its sequence, from block 0 upward (a
// decode step is a tile of one query in the same kernels), with per-element wgmma products, the
// per-row softmax and epilogue every tensor-core forward shares (attention_device.cuh) and a
// per-element causal mask, so the other rows of its CTA (the tile, its size, packed heads) never
// enter its arithmetic. A block past a row's position is fully masked (p = 0, rescale factor
// exactly 1) and leaves its state bit-identical: a warpgroup may skip blocks past all its rows, and
// a CTA never loads one past its last query.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/async_copy.cuh"
#include "common/cuda_check.cuh"
#include "common/tensor_map.cuh"
#include "common/wgmma.cuh"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

// Hopper forward (sm_90a): the same KV blocks and per-row arithmetic as forward_mma_kernel
// (softmax_block, store_rows), with the two products on wgmma: S = Q·Kᵀ as m64n64k16 with Q and K
// K-major in shared memory, O += P·V as m64nDk16 with P in registers and V N-major. Launched for
// decode-like launches; prefill takes forward_wgmma_producer_kernel below, the same arithmetic
// with TMA loads from a producer warpgroup.
//
// With PackHeads (the launcher picks it for decode-like launches with enough tiles to fill the
// GPU), heads that share a KV head share the CTA and each K/V block it loads: with G = heads /
// kv_heads in {2, 4, 8}, CTA (tile, head h) of the grid instead takes sub-tile h % G (128 / G
// queries of the tile) for all G heads of h's group; its row r is head (h - h % G) + r / (128 / G),
// query r % (128 / G) of the sub-tile. Otherwise it takes the whole tile for head h. A row's
// arithmetic is the same either way, and for any number of stages: which rows share the CTA and how
// far ahead it loads are scheduling choices (see the file comment). Each warp's 16 rows are one
// head's consecutive queries. Each of the two warpgroups walks every block up to the last real
// query among its rows; blocks past a row's own position are fully masked for it. Q, K and V sit in
// 128-byte swizzled panels of 64 elements: row r's 16-byte chunk c at r * 128 + ((c ^ (r % 8)) *
// 16).
template <typename T, int D, int Stages>
struct WgmmaForwardTile {
  static constexpr int queries = attention_mma_tile_queries;  // rows per CTA
  static constexpr int keys = attention_mma_kv_block;
  static constexpr int warpgroups = queries / 64;
  static constexpr int threads = warpgroups * 128;
  static constexpr int panels = D / 64;  // 128-byte panels per row
  static constexpr int q_panel_bytes = queries * 128;
  static constexpr int kv_panel_bytes = keys * 128;
  static constexpr int q_bytes = panels * q_panel_bytes;
  static constexpr int kv_bytes = panels * kv_panel_bytes;  // one stage of K or of V
  static constexpr int stages = Stages;  // K/V blocks in flight (decode-like launches: 4)
  static constexpr int shared_bytes = q_bytes + 2 * stages * kv_bytes + 1024;  // + alignment slack
  static_assert(shared_bytes <= 227 * 1024, "shared memory per block");
  static_assert(sizeof(T) == 2 && keys == 64 && queries == 128 && D % 64 == 0,
                "16-bit types, 64-key blocks, 128 rows");
  static_assert(stages >= 2 && (stages & (stages - 1)) == 0, "a power of two of stages");
  // The output staging (16 rows of D + 8 per warp) reuses the K/V stages after the last block.
  static_assert(warpgroups * 4 * 16 * (D + 8) * 2 <= 2 * stages * kv_bytes,
                "staging fits in the K/V stages");
};

#ifdef BITCHECK_ATTENTION_SM90A
// S = Q·Kᵀ of one 64-key block of the synchronous kernels: D/16 k-steps of m64n64k16 from the
// warpgroup's Q (q_desc0) and the stage's K (k_desc0 + kv_stage), committed, not waited for.
template <typename T, int D, typename Tile>
__device__ __forceinline__ void issue_scores(float (&s)[Tile::keys / 8][4], std::uint64_t q_desc0,
                                             std::uint64_t k_desc0, std::uint32_t kv_stage) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    constexpr std::uint32_t q_panel = Tile::q_panel_bytes >> 4,
                            kv_panel = Tile::kv_panel_bytes >> 4;
    const std::uint32_t step = (kk % 4) * 2;  // 16 elements further along the 128-byte row
    wgmma::ss_m64n64k16<T>(reinterpret_cast<float(&)[Tile::keys / 2]>(s),
                           wgmma::advance(q_desc0, (kk / 4) * q_panel + step),
                           wgmma::advance(k_desc0, kv_stage + (kk / 4) * kv_panel + step), kk > 0);
  }
  wgmma::commit();
}

#endif

template <typename T, int D, int Stages, bool PackHeads>
__global__ void __launch_bounds__(WgmmaForwardTile<T, D, Stages>::threads, 1)
    forward_wgmma_kernel(const T* q, const T* k_cache, const T* v_cache, T* o, float* lse,
                         const AttentionTile* tiles, AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaForwardTile<T, D, Stages>;
  constexpr int BN = Tile::keys;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* q_s = shared;
  unsigned char* k_s = q_s + Tile::q_bytes;  // [stages][panels][keys][128 bytes]
  unsigned char* v_s = k_s + Tile::stages * Tile::kv_bytes;

  const AttentionTile tile = tiles[blockIdx.x / shape.heads];
  const int group = shape.heads / shape.kv_heads;
  const int pack =
      PackHeads && (group == 2 || group == 4 || group == 8) ? group : 1;  // heads sharing the CTA
  const int per_head = Tile::queries / pack;                              // queries per head
  const int within = static_cast<int>(blockIdx.x % shape.heads), first_head = within / pack * pack;
  const int first_query = within % pack * per_head, count = min(tile.count - first_query, per_head);
  if (count <= 0) return;  // a sub-tile past the tile's queries (uniform over the CTA)
  const int kv_head = first_head / group, start = tile.start_position + first_query;
  const int first_slot = tile.first_slot + first_query;
  const int warp = static_cast<int>(threadIdx.x) / warp_size,
            lane = static_cast<int>(threadIdx.x) % warp_size;
  // The warpgroup and the last block, read from lane 0: the same in every lane, and so for the
  // compiler too, which then keeps the block loop, the stage and the wgmma descriptors in uniform
  // registers (no per-thread descriptor moved over before each wgmma).
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0), g = lane >> 2, t = lane & 3;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const int last_position = start + count - 1,
            last_block = __shfl_sync(0xffffffffu, last_position / BN, 0);
  const T* k_sequence = k_cache + tile.cache_base * kv_stride + kv_head * D;
  const T* v_sequence = v_cache + tile.cache_base * kv_stride + kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the CTA's last query become zeros
    const int valid_keys = last_position - block * BN + 1;
    load_swizzled_async<T, D, BN, Tile::threads>(
        k_s + stage * Tile::kv_bytes, k_sequence + block * BN * kv_stride, kv_stride, valid_keys);
    load_swizzled_async<T, D, BN, Tile::threads>(
        v_s + stage * Tile::kv_bytes, v_sequence + block * BN * kv_stride, kv_stride, valid_keys);
  };
  // Copy groups: one per block (Q rides with block 0), Tile::stages - 1 ahead of the block in use;
  // empty groups past the last block keep the count uniform.
  if constexpr (PackHeads) {
    load_packed_queries_async<T, D, Tile::queries, Tile::threads>(q_s, q, q_stride, first_slot,
                                                                  first_head, per_head, count);
  } else {
    load_swizzled_async<T, D, Tile::queries, Tile::threads>(
        q_s, q + first_slot * q_stride + first_head * D, q_stride, count);
  }
#pragma unroll
  for (int i = 0; i < Tile::stages - 1; ++i) {
    if (i <= last_block) load_block(i, i);
    copy_async_commit();
  }

  const int r0 = warp * 16, warp_query = r0 % per_head, h = first_head + r0 / per_head;
  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int warp_first_position = start + warp_query;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  // The warpgroup's queries: 64 consecutive ones of one head, or all per_head of several heads.
  const int group_first_query = per_head >= 64 ? warpgroup * 64 % per_head : 0;
  const int group_last_query =
      min(per_head >= 64 ? group_first_query + 63 : per_head - 1, count - 1);
  const int group_last_position =
      __shfl_sync(0xffffffffu, group_first_query < count ? start + group_last_query : -1, 0);
  const float scale_log2 = shape.scale * log2_e;
  // Descriptors of the warpgroup's Q and of stage 0's K and V; a stage, a panel or a k-step
  // further is a constant added to the address field (wgmma::advance).
  const std::uint64_t q_desc0 =
      wgmma::descriptor(shared_address(q_s) + warpgroup * 64 * 128, 16, 1024);
  const std::uint64_t k_desc0 = wgmma::descriptor(shared_address(k_s), 16, 1024);
  // V (16 keys x D, N-major): the leading offset steps to the next 64-element panel of D, the
  // stride offset to the next 8 keys.
  const std::uint64_t v_desc0 = wgmma::descriptor(shared_address(v_s), Tile::kv_panel_bytes, 1024);

  for (int block = 0; block <= last_block; ++block) {
    copy_async_wait<Tile::stages - 2>();  // this thread's copies of the block have landed
    __syncthreads();  // everyone's have, and nobody still reads the stage refilled next (block -
                      // 1's)
    const int ahead = block + Tile::stages - 1;
    if (ahead <= last_block) load_block(ahead, ahead & (Tile::stages - 1));
    copy_async_commit();
    if (block * BN > group_last_position) continue;  // uniform over the warpgroup
    const std::uint32_t stage = static_cast<std::uint32_t>(block) & (Tile::stages - 1);
    const std::uint32_t kv_stage = stage * (Tile::kv_bytes >> 4);

    float s[BN / 8][4];  // the first k-step writes it (accumulate 0)
    issue_scores<T, D, Tile>(s, q_desc0, k_desc0, kv_stage);
    wgmma::wait_all();
    softmax_block<BN, D>(s, acc, m, l, block * BN, warp_first_position, position, t, scale_log2);
    // P, all packed before the fence so the four wgmmas issue back to back.
    std::uint32_t pa[BN / 16][4];
    pack_p_fragments<T, BN>(s, pa);
    issue_pv<T, D, Tile::keys>(acc, pa, v_desc0, kv_stage);
    wgmma::wait_all();
  }
  copy_async_wait_all();
  __syncthreads();  // every warpgroup is done with K and V: the stages become output staging
  if (warp_query >= count) return;  // padding only; no barrier follows
  T* o_s = reinterpret_cast<T*>(k_s) + warp * 16 * (D + 8);
  store_rows<T, D>(acc, m, l, o_s, o, lse, first_slot + warp_query, count - warp_query, h, lane,
                   q_stride, shape.heads, scale_log2);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// The synchronous kernel's prefill with a producer warpgroup (sm_90a): the same rows, blocks and
// arithmetic as forward_wgmma_kernel<T, D, Stages, false> (issue_scores, softmax_block,
// issue_pv, store_rows), so the same bits, but the K/V blocks come by TMA from one warp of a third
// warpgroup into Stages stages on full and empty mbarriers instead of by cp.async from every
// thread behind a __syncthreads per block: each consumer warpgroup waits only for its own block's
// data and frees a stage when its products are done, so the two warpgroups of a CTA no longer wait
// for each other every block, and issue no loads. The last block's V rows past the CTA's last
// query become zeros (a masked p = 0 times a pad slot's NaN would be NaN); the rows of K past it
// are masked by position before they are used. The producer warpgroup gives its registers to the
// consumers (setmaxnreg): at head dim 64 each SM keeps two CTAs of two consumer warpgroups at 104
// registers. (One producer warp instead, 288 threads capped at 112 registers, ran 35 % slower on an
// H100; for two such CTAs per SM ptxas's own register bound is 96.)
template <typename T, int D, int Stages>
struct WgmmaProducerTile : WgmmaForwardTile<T, D, Stages> {
  using Base = WgmmaForwardTile<T, D, Stages>;
  static constexpr int consumer_threads = Base::threads;
  static constexpr int threads = consumer_threads + 128;  // + the producer warpgroup
  static constexpr int ctas_per_sm = D == 64 ? 2 : 1;
  // setmaxnreg moves registers only within the CTA's allocation at launch: 65536 / (384 *
  // ctas_per_sm) per thread, in steps of 8 (80 at head dim 64, 168 at 128).
  static constexpr int producer_registers = 24;
  static constexpr int launch_registers = 65536 / (threads * ctas_per_sm) / 8 * 8;
  static constexpr int consumer_registers =
      (launch_registers * threads - producer_registers * 128) / consumer_threads / 8 * 8;
  static_assert(producer_registers * 128 + consumer_registers * consumer_threads <=
                    launch_registers * threads,
                "setmaxnreg stays within the CTA's registers");
  static constexpr int shared_bytes = Base::shared_bytes + 3 * Stages * 8;  // + the mbarriers
  static_assert(shared_bytes * ctas_per_sm + 1024 * ctas_per_sm <= 228 * 1024,
                "shared memory per SM");
};

template <typename T, int D, int Stages>
__global__ void __launch_bounds__(WgmmaProducerTile<T, D, Stages>::threads,
                                  WgmmaProducerTile<T, D, Stages>::ctas_per_sm)
    forward_wgmma_producer_kernel(const __grid_constant__ CUtensorMap k_map,
                                  const __grid_constant__ CUtensorMap v_map, const T* q,
                                  const T* v_cache, T* o, float* lse, const AttentionTile* tiles,
                                  AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaProducerTile<T, D, Stages>;
  constexpr int BN = Tile::keys, S = Stages;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* q_s = shared;
  unsigned char* k_s = q_s + Tile::q_bytes;  // [stages][panels][keys][128 bytes]
  unsigned char* v_s = k_s + S * Tile::kv_bytes;
  auto* full_k = reinterpret_cast<std::uint64_t*>(v_s + S * Tile::kv_bytes);  // after the stages
  std::uint64_t* full_v = full_k + S;
  std::uint64_t* empty = full_v + S;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      async_copy::mbar_init(&full_k[s], 1);
      async_copy::mbar_init(&full_v[s], 1);
      async_copy::mbar_init(&empty[s], Tile::consumer_threads / warp_size);  // lane 0 of each
    }
    async_copy::mbar_init_fence();
  }
  __syncthreads();

  const AttentionTile tile = tiles[blockIdx.x / shape.heads];
  const int h = static_cast<int>(blockIdx.x % shape.heads), count = tile.count;
  const int kv_head = h / (shape.heads / shape.kv_heads), start = tile.start_position;
  const int warp = static_cast<int>(threadIdx.x) / warp_size,
            lane = static_cast<int>(threadIdx.x) % warp_size;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const int last_position = start + count - 1,
            last_block = __shfl_sync(0xffffffffu, last_position / BN, 0);

  if (warp >= Tile::consumer_threads / warp_size) {  // the producer warpgroup
    registers_decrease<Tile::producer_registers>();
    if (warp > Tile::consumer_threads / warp_size) return;  // one warp loads
    const int valid_last = last_position - last_block * BN + 1;
    for (int block = 0; block <= last_block; ++block) {
      const unsigned stage = static_cast<unsigned>(block) % S,
                     use = static_cast<unsigned>(block) / S;
      async_copy::mbar_wait(&empty[stage], (use & 1u) ^ 1u);
      const int row = tile.cache_base + block * BN;
      if (lane == 0) {
        async_copy::mbar_expect_tx(&full_k[stage], Tile::kv_bytes);
#pragma unroll
        for (int p = 0; p < Tile::panels; ++p) {
          async_copy::tma_load_2d(k_s + stage * Tile::kv_bytes + p * Tile::kv_panel_bytes, &k_map,
                                  &full_k[stage], kv_head * D + p * 64, row);
        }
      }
      if (block == last_block && valid_last < BN) {
        copy_block_zero_tail_async<T, D, BN>(v_s + stage * Tile::kv_bytes,
                                             v_cache + row * kv_stride + kv_head * D, kv_stride,
                                             valid_last, lane);
        copy_async_commit();
        copy_async_wait_all();
        async_copy::fence_proxy_async_shared();  // the consumers' wgmma reads these rows
        __syncwarp();
        if (lane == 0) async_copy::mbar_arrive(&full_v[stage]);
      } else if (lane == 0) {
        async_copy::mbar_expect_tx(&full_v[stage], Tile::kv_bytes);
#pragma unroll
        for (int p = 0; p < Tile::panels; ++p) {
          async_copy::tma_load_2d(v_s + stage * Tile::kv_bytes + p * Tile::kv_panel_bytes, &v_map,
                                  &full_v[stage], kv_head * D + p * 64, row);
        }
      }
    }
    return;
  }

  registers_increase<Tile::consumer_registers>();
  load_swizzled_async<T, D, Tile::queries, Tile::consumer_threads>(
      q_s, q + tile.first_slot * q_stride + h * D, q_stride, count);
  copy_async_commit();
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0), g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int warp_first_position = start + r0;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  const int group_last_position = __shfl_sync(
      0xffffffffu, warpgroup * 64 < count ? start + min(warpgroup * 64 + 63, count - 1) : -1, 0);
  const float scale_log2 = shape.scale * log2_e;
  const std::uint64_t q_desc0 =
      wgmma::descriptor(shared_address(q_s) + warpgroup * 64 * 128, 16, 1024);
  const std::uint64_t k_desc0 = wgmma::descriptor(shared_address(k_s), 16, 1024);
  const std::uint64_t v_desc0 = wgmma::descriptor(shared_address(v_s), Tile::kv_panel_bytes, 1024);
  copy_async_wait_all();
  async_copy::fence_proxy_async_shared();  // wgmma reads Q through the async proxy
  async_copy::named_barrier_sync(1, Tile::consumer_threads);
  // The consumers' barriers by shared-memory address: full_k, full_v and empty, 8 bytes per stage.
  const std::uint32_t full_k_address = shared_address(full_k),
                      full_v_address = full_k_address + S * 8,
                      empty_address = full_v_address + S * 8;
  auto release = [&](unsigned stage) {
    __syncwarp();
    if (lane == 0) async_copy::mbar_arrive(empty_address + stage * 8);
  };

  for (int block = 0; block <= last_block; ++block) {
    const unsigned stage = static_cast<unsigned>(block) % S,
                   phase = (static_cast<unsigned>(block) / S) & 1u;
    if (block * BN > group_last_position) {  // uniform over the warpgroup; the other one has rows
      async_copy::mbar_wait(full_v_address + stage * 8, phase);
      release(stage);
      continue;
    }
    const std::uint32_t kv_stage = stage * (Tile::kv_bytes >> 4);
    float s[BN / 8][4];  // the first k-step writes it (accumulate 0)
    async_copy::mbar_wait(full_k_address + stage * 8, phase);
    issue_scores<T, D, Tile>(s, q_desc0, k_desc0, kv_stage);
    wgmma::wait_all();
    softmax_block<BN, D>(s, acc, m, l, block * BN, warp_first_position, position, t, scale_log2);
    std::uint32_t pa[BN / 16][4];
    pack_p_fragments<T, BN>(s, pa);
    async_copy::mbar_wait(full_v_address + stage * 8, phase);
    issue_pv<T, D, Tile::keys>(acc, pa, v_desc0, kv_stage);
    wgmma::wait_all();
    release(stage);
  }
  // Every block's loads were waited for; every consumer is done with K and V once all are here.
  async_copy::named_barrier_sync(1, Tile::consumer_threads);
  if (r0 >= count) return;  // padding only; no barrier follows
  T* o_s = reinterpret_cast<T*>(k_s) + warp * 16 * (D + 8);
  store_rows<T, D>(acc, m, l, o_s, o, lse, tile.first_slot + r0, count - r0, h, lane, q_stride,
                   shape.heads, scale_log2);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

template <typename T, int D, int Stages, bool PackHeads>
void launch_wgmma_stages(const void* q, const void* k_cache, const void* v_cache, void* o,
                         float* lse, const AttentionTile* tiles, int tile_count,
                         AttentionShape shape, CUstream_st* stream) {
  using Tile = WgmmaForwardTile<T, D, Stages>;
  static bool configured = false;
  if (!configured) {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(forward_wgmma_kernel<T, D, Stages, PackHeads>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tile::shared_bytes));
    configured = true;
  }
  const std::int64_t ctas = static_cast<std::int64_t>(tile_count) * shape.heads;
  if (ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention_forward_mma: tiles * heads exceeds the grid");
  forward_wgmma_kernel<T, D, Stages, PackHeads>
      <<<static_cast<unsigned>(ctas), Tile::threads, Tile::shared_bytes, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
          static_cast<T*>(o), lse, tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

// K/V stages of the producer-warpgroup prefill kernel (2 ran as fast at head dim 64 on an H100).
constexpr int producer_stages = 4;

template <typename T, int D>
void launch_wgmma_producer(const void* q, const void* k_cache, const void* v_cache, void* o,
                           float* lse, const AttentionTile* tiles, int tile_count,
                           std::int64_t cache_rows, AttentionShape shape, CUstream_st* stream) {
  using Tile = WgmmaProducerTile<T, D, producer_stages>;
  static std::once_flag configured;
  std::call_once(configured, [] {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(forward_wgmma_producer_kernel<T, D, producer_stages>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tile::shared_bytes));
  });
  const std::int64_t ctas = static_cast<std::int64_t>(tile_count) * shape.heads;
  if (ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention_forward_mma: tiles * heads exceeds the grid");
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const std::int64_t kv_width = static_cast<std::int64_t>(shape.kv_heads) * D;
  const CUtensorMap k_map = make_tensor_map(type, k_cache, cache_rows, kv_width, 64);
  const CUtensorMap v_map = make_tensor_map(type, v_cache, cache_rows, kv_width, 64);
  forward_wgmma_producer_kernel<T, D, producer_stages>
      <<<static_cast<unsigned>(ctas), Tile::threads, Tile::shared_bytes, stream>>>(
          k_map, v_map, static_cast<const T*>(q), static_cast<const T*>(v_cache),
          static_cast<T*>(o), lse, tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_forward_wgmma_synchronous(DeviceDType dtype, const void* q, const void* k_cache,
                                      const void* v_cache, void* o, float* lse,
                                      const AttentionTile* tiles, int tile_count,
                                      std::int64_t cache_rows, AttentionShape shape,
                                      bool decode_like, bool pack_heads, CUstream_st* stream) {
  dispatch_tensor_core(dtype, shape.dim, [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value;
    if (pack_heads) {
      launch_wgmma_stages<T, D, 4, true>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape,
                                         stream);
    } else if (decode_like) {
      launch_wgmma_stages<T, D, 4, false>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape,
                                          stream);
    } else {
      launch_wgmma_producer<T, D>(q, k_cache, v_cache, o, lse, tiles, tile_count, cache_rows, shape,
                                  stream);
    }
  });
}

}  // namespace bitcheck::cuda
