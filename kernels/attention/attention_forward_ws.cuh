// The warp-specialized wgmma attention forward kernel (sm_90a; bf16/fp16, head dim 128) and its
// launch: per CTA a TMA producer warp and one or two consumer warpgroups, keys in 2048-key chunks.
// A template included by the two files that instantiate it: attention_forward_ws.cu (prefill) and
// attention_decode.cu (decode-like launches), each in its own anonymous namespace.
//
// What makes a row's bits independent of batch, position in the batch, padding, chunked prefill
// and decode, here as in the synchronous kernels (attention_forward_wgmma_synchronous.cu): a row
// reduces its keys in 64-key blocks (attention_mma_kv_block) from position 0 upward, each block
// through softmax_scores and rescale_rows, its two products on the same wgmma instructions
// (m64n64k16 for S = Q·Kᵀ with the D/16 k-steps in order, then m64nDk16 for O += P·V with the four
// 16-key steps in order). On top of that the blocks form chunks of attention_chunk_keys (2048
// keys, 32 blocks) aligned to position 0: a chunk starts from a fresh state (m = -inf, l = 0,
// acc = 0), chunk 0's final state is the row's state, and every later chunk holding a key at or
// before the row's position merges into it in chunk order (chunk_merge_weights and merge_element;
// a chunk with no such key, m = -inf, leaves it as it is). A prefill CTA walks the chunks of its
// rows in order and merges each as it ends; a decode launch gives each chunk its own CTA, which
// writes the chunk's state, and the merge kernel merges them in the same order with the same
// operations. Which rows share a CTA or a warpgroup, which work items a persistent CTA takes and in
// what order, how many stages the producer runs ahead, whether the next Q·Kᵀ is issued before the
// current P·V, and the two consumer warpgroups' ping-pong are scheduling, never arithmetic.
//
// Without chunks (ChunkBlocks = 0, the test-only
// AttentionForwardKernel::warp_specialized_unchunked) these kernels compute the bits of the
// synchronous wgmma kernel; the GPU tests compare them bit for bit. The chunks change the bits of
// rows past position 2047 (written down in docs/attention.md, as is the move from 512-key chunks),
// so that a decode step can split its keys.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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
using async_copy::fence_proxy_async_shared;
using async_copy::mbar_arrive;
using async_copy::mbar_expect_tx;
using async_copy::mbar_init;
using async_copy::mbar_init_fence;
using async_copy::mbar_wait;
using async_copy::named_barrier_sync;
using async_copy::tma_load_2d;

constexpr int chunk_blocks = attention_chunk_keys / attention_mma_kv_block;
static_assert(attention_chunk_keys % attention_mma_kv_block == 0, "chunks of whole blocks");

// Shared memory and threads of the warp-specialized forward: warpgroup 0 is the producer (one warp
// issues the K/V loads, and a prefill CTA's Q), warpgroups 1..Consumers each own 64 query rows. Q
// of consumer w sits in its own 128-byte swizzled panels, [panels][64 rows][128 bytes]; K and V of
// each stage likewise [panels][64 keys][128 bytes]: row r's 16-byte chunk c at r * 128 + ((c ^ (r %
// 8)) * 16), the layout the TMA writes with 128B swizzle. Prefill CTAs (two consumers) also keep
// each consumer thread's merged chunk accumulators (D / 2 floats, [element][thread] so a warp's
// accesses are consecutive) and reuse them as the output staging; decode CTAs (one consumer) are
// split at chunks (ChunkBlocks > 0) or, test-only, not at all, and stage their output in the
// stages. Stages: K/V blocks in flight. Prefill runs 4; decode runs 2 with two CTAs per SM
// (launches with more CTAs than SMs) or 4 with one (no more CTAs than SMs: each SM streams a
// single chunk, so the loads it keeps in flight set its pace).
template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
struct WsTile {
  static constexpr bool decode = Consumers == 1;
  static constexpr bool split = decode && ChunkBlocks > 0;
  static constexpr int rows = 64 * Consumers;
  static constexpr int keys = attention_mma_kv_block;
  static constexpr int threads = 128 * (Consumers + 1);
  static constexpr int ctas_per_sm = decode && Stages == 2 ? 2 : 1;
  static constexpr int panels = D / 64;
  static constexpr int q_panel_bytes = 64 * 128;          // one consumer's 64 rows
  static constexpr int q_bytes = panels * q_panel_bytes;  // per consumer
  static constexpr int kv_panel_bytes = keys * 128;
  static constexpr int kv_bytes = panels * kv_panel_bytes;  // K or V of one block
  static constexpr int stages = Stages;
  static constexpr int merge_bytes = decode ? 0 : Consumers * 128 * (D / 2) * 4;
  // Prefill CTAs are persistent: each takes work item blockIdx.x, then the next untaken one of
  // the longest-first list as its producer is ready for it (WsParams::next_item), the producer
  // loading the next item's Q and first blocks while the consumers finish the last.
  static constexpr bool persistent = !decode;
  static constexpr int barrier_bytes = 3 * stages * 8 + 2 * 8 + 8;  // + the next item's index
  static constexpr int shared_bytes =
      Consumers * q_bytes + 2 * stages * kv_bytes + merge_bytes + barrier_bytes + 1024;
  // Registers after setmaxnreg: the producer gives back what the consumers take, within the
  // 65536 / (threads * ctas_per_sm) each thread starts with (168, 128, or 256 for one decode CTA
  // per SM).
  static constexpr int producer_registers = 24;
  static constexpr int consumer_registers = ctas_per_sm == 2 ? 232 : 240;
  static_assert(sizeof(T) == 2 && keys == 64 && D == 128, "16-bit, 64 keys, head dim 128");
  static_assert(Consumers == 1 || Consumers == 2, "one or two consumer warpgroups");
  static_assert(Stages == 4 || (decode && Stages == 2), "prefill on 4 stages, decode on 2 or 4");
  static_assert(shared_bytes * ctas_per_sm + 1024 * ctas_per_sm <= 228 * 1024,
                "shared memory per SM");
  static_assert(decode || 64 * (D + 8) * 2 <= 128 * (D / 2) * 4, "staging fits the merge area");
  static_assert(!decode || 64 * (D + 8) * 2 <= 2 * stages * kv_bytes, "staging fits the stages");
  static_assert((producer_registers + Consumers * consumer_registers) * 128 <=
                    (65536 / (threads * ctas_per_sm)) / 8 * 8 * threads,
                "setmaxnreg stays within the CTA's registers");
};

template <typename T>
struct WsParams {
  const T* q;
  const T* v_cache;  // the last, partial block of V is copied from here with zero fill
  T* o;
  float* lse;
  const AttentionTile* tiles;
  const AttentionWorkItem* items;  // split decode: one per group of `units` CTAs
  // Prefill: the (tile, unit) of work item i as tile * units + unit, in the order CTAs take them
  // (attention_prefill_order: sections of K/V that fit in L2, longest tiles first in each).
  const int* order;
  float* partials;  // split decode: chunk states, (D + 2) floats each
  AttentionShape shape;
  int units;  // CTAs per tile (prefill) or per work item (decode): heads, or KV heads when packed
  int pack;   // heads sharing a CTA (1, or the group size when packed)
  int pingpong;    // two consumer warpgroups take turns issuing their products
  int item_count;  // work items (tile, unit) of a persistent launch
  // Persistent launches: how many items past the first gridDim.x have been taken (0 at launch;
  // the launch's last take sets it back to 0, so one counter serves every launch in a stream).
  int* next_item;
};

#ifdef BITCHECK_ATTENTION_SM90A
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// What the producer and the consumers of one CTA share.
struct WsCta {
  unsigned char* q_s;
  unsigned char* k_s;
  unsigned char* v_s;
  float* merge_s;
  std::uint64_t* full_k;
  std::uint64_t* full_v;
  std::uint64_t* empty;
  std::uint64_t* q_full;   // persistent: the item's Q has landed
  std::uint64_t* q_empty;  // persistent: every consumer warp holds its Q rows in registers
  AttentionTile tile;
  int chunk;
  std::int64_t partial_base;
  int pack, per_head, first_head, count, kv_head;
  int last_position, last_block, first_block, end_block, blocks;
};

#ifdef BITCHECK_ATTENTION_SM90A
// Persistent: the index of the item whose Q the producer loads (-1: none left), right after
// q_empty (computed where used: one more pointer in WsCta made the producer spill at 24 registers).
__device__ __forceinline__ int* item_slot(const WsCta& cta) {
  return reinterpret_cast<int*>(cta.q_empty + 1);
}

// This thread's merged accumulators in shared memory: float4 dt (acc[dt][0..3]) at
// base + dt * 128 * 16, so a warp's accesses are 512 consecutive bytes.
__device__ __forceinline__ float4 load_merged(std::uint32_t address) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}
__device__ __forceinline__ void store_merged(std::uint32_t address, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(address), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}

// A chunk's state joins its rows' merged state (merged_m, merged_l and the merge area at
// merge_address, or for the last chunk acc itself, which then holds the rows' final
// accumulators): chunk 0 becomes it, a later chunk merges into every row for which it holds a key
// (m > -inf).
template <int D>
__device__ __forceinline__ void join_chunk(int chunk_index, bool last, float (&acc)[D / 8][4],
                                           float (&chunk_m)[2], float (&chunk_l)[2],
                                           float (&merged_m)[2], float (&merged_l)[2],
                                           std::uint32_t merge_address, float scale_log2) {
  constexpr std::uint32_t step = 128 * 16;  // bytes between a thread's float4s
  reduce_row_sums(chunk_l);
  if (chunk_index == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      merged_m[r] = chunk_m[r];
      merged_l[r] = chunk_l[r];
    }
    if (!last) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        store_merged(merge_address + dt * step,
                     make_float4(acc[dt][0], acc[dt][1], acc[dt][2], acc[dt][3]));
    }
    return;
  }
  float a[2] = {1.0f, 1.0f}, b[2] = {0.0f, 0.0f};
  bool joins[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    joins[r] = chunk_m[r] != -INFINITY;
    if (joins[r])
      chunk_merge_weights(merged_m[r], merged_l[r], chunk_m[r], chunk_l[r], scale_log2, a[r], b[r]);
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    const float4 stored = load_merged(merge_address + dt * step);
    const float previous[4] = {stored.x, stored.y, stored.z, stored.w};
    float merged[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      merged[e] = joins[r] ? merge_element(previous[e], a[r], acc[dt][e], b[r]) : previous[e];
    }
    if (last) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[dt][e] = merged[e];
    } else {
      store_merged(merge_address + dt * step,
                   make_float4(merged[0], merged[1], merged[2], merged[3]));
    }
  }
}

// The producer warp: block after block into the stages as the consumers free them. The last
// block's V rows past the CTA's last query become zeros (copied with zero fill, as the synchronous
// kernel loads them): a masked p = 0 times a pad slot's NaN would be NaN.
template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
__device__ __forceinline__ void produce(const WsCta& cta, const CUtensorMap* k_map,
                                        const CUtensorMap* v_map, const WsParams<T>& params,
                                        int lane, int base) {
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  constexpr int BN = Tile::keys, S = Tile::stages;
  const std::int64_t kv_stride = static_cast<std::int64_t>(params.shape.kv_heads) * D;
  const int valid_last = cta.last_position - cta.last_block * BN + 1;
  for (int i = 0; i < cta.blocks; ++i) {  // the CTA's block uses base, base + 1, ...
    const int block = cta.first_block + i, stage = (base + i) % S, use = (base + i) / S;
    mbar_wait(&cta.empty[stage], (use & 1) ^ 1);
    const int row = cta.tile.cache_base + block * BN;
    if (lane == 0) {
      mbar_expect_tx(&cta.full_k[stage], Tile::kv_bytes);
#pragma unroll
      for (int p = 0; p < Tile::panels; ++p) {
        tma_load_2d(cta.k_s + stage * Tile::kv_bytes + p * Tile::kv_panel_bytes, k_map,
                    &cta.full_k[stage], cta.kv_head * D + p * 64, row);
      }
    }
    if (block == cta.last_block && valid_last < BN) {
      copy_block_zero_tail_async<T, D, BN>(cta.v_s + stage * Tile::kv_bytes,
                                           params.v_cache + row * kv_stride + cta.kv_head * D,
                                           kv_stride, valid_last, lane);
      copy_async_commit();
      copy_async_wait_all();
      fence_proxy_async_shared();  // the consumers' wgmma reads these rows
      __syncwarp();
      if (lane == 0) mbar_arrive(&cta.full_v[stage]);
    } else if (lane == 0) {
      mbar_expect_tx(&cta.full_v[stage], Tile::kv_bytes);
#pragma unroll
      for (int p = 0; p < Tile::panels; ++p) {
        tma_load_2d(cta.v_s + stage * Tile::kv_bytes + p * Tile::kv_panel_bytes, v_map,
                    &cta.full_v[stage], cta.kv_head * D + p * 64, row);
      }
    }
  }
}

// A persistent CTA's Q for work item number `k` of the CTA (rows 64w + r of each consumer
// warpgroup w: query 64w + r of the tile), once the consumers hold the previous item's in
// registers. Rows past the tile's queries load whatever follows them (zeros past the last slot):
// their rows are computed and never stored, and no other row's bits depend on them.
// Its index goes to the consumers through item_slot, written before the arrive that they wait for
// (an mbarrier arrive releases, its wait acquires); item < 0 tells them that none is left.
template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
__device__ __forceinline__ void produce_queries(const WsCta& cta, const CUtensorMap* q_map, int k,
                                                int item, int lane) {
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  mbar_wait(cta.q_empty, (k & 1) ^ 1);  // every consumer has read the previous index, too
  if (lane != 0) return;
  *item_slot(cta) = item;
  if (item < 0) {
    mbar_arrive(cta.q_full);
    return;
  }
  mbar_expect_tx(cta.q_full, Consumers * Tile::q_bytes);
#pragma unroll
  for (int w = 0; w < Consumers; ++w) {
#pragma unroll
    for (int p = 0; p < Tile::panels; ++p) {
      tma_load_2d(cta.q_s + w * Tile::q_bytes + p * Tile::q_panel_bytes, q_map, cta.q_full,
                  cta.first_head * D + p * 64, cta.tile.first_slot + 64 * w);
    }
  }
}

// Consumer warpgroup w (thread its index in it, 0..127) on the CTA's k-th work item, whose blocks
// are the CTA's stage uses base, base + 1, ...: 64 rows, CTA rows 64w + r. Unpacked, row r
// is query 64w + r of head first_head; packed (one warpgroup), head first_head + r / per_head,
// query r % per_head. Iteration j issues S = Q·Kᵀ of block j and O += P·V of block j - 1, then
// finishes block j's softmax while that P·V runs; with two warpgroups in ping-pong, each issues its
// products in its turn, so one's softmax overlaps the other's products.
template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
__device__ __forceinline__ void consume(const WsCta& cta, const WsParams<T>& params, int w,
                                        int thread, int base, int k) {
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  constexpr int BN = Tile::keys, S = Tile::stages;
  const AttentionShape shape = params.shape;
  const AttentionTile tile = cta.tile;
  const int lane = thread % warp_size, warp = thread / warp_size, g = lane >> 2, t = lane & 3;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D;
  unsigned char* q_w = cta.q_s + w * Tile::q_bytes;
  const int pack = cta.pack, per_head = cta.per_head, count = cta.count;

  if constexpr (!Tile::persistent) {  // persistent: the caller waited for the TMA load of Q
    if (pack == 1) {
      load_swizzled_async<T, D, 64, 128>(
          q_w, params.q + (tile.first_slot + 64 * w) * q_stride + cta.first_head * D, q_stride,
          count - 64 * w, thread);
    } else {
      load_packed_queries_async<T, D, 64, 128>(q_w, params.q, q_stride, tile.first_slot,
                                               cta.first_head, per_head, count, thread);
    }
    copy_async_commit();
    copy_async_wait_all();
    fence_proxy_async_shared();  // wgmma reads Q through the async proxy
    named_barrier_sync(1 + w, 128);
  }
  // Each warp keeps its 16 rows of Q as wgmma A fragments (the m16n8k16 layout: ldmatrix of rows
  // lane & 15, 16-byte chunk lane >> 4 of each k16 step) for the whole KV loop, so S = Q·Kᵀ reads
  // only K from shared memory (the same products as with Q there: the GPU tests compare the bits).
  std::uint32_t qa[D / 16][4];
  {
    const int row = 16 * (thread / warp_size) + (thread & 15);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int chunk = (kk % 4) * 2 + ((thread % warp_size) >> 4);
      ldmatrix_x4(qa[kk], shared_address(q_w + (kk / 4) * Tile::q_panel_bytes + row * 128 +
                                         ((chunk ^ (row % 8)) << 4)));
    }
  }
  if constexpr (Tile::persistent) {  // the next item's Q may come
    __syncwarp();
    if (lane == 0) mbar_arrive(cta.q_empty);
  }

  auto query_of = [&](int r) { return pack == 1 ? 64 * w + r : r % per_head; };
  auto head_of = [&](int r) { return pack == 1 ? cta.first_head : cta.first_head + r / per_head; };
  const int r0 = 16 * warp + g;                // this thread's rows r0 and r0 + 8
  const int warp_query = query_of(16 * warp);  // the warp's first (and lowest) query
  const int warp_first_position = tile.start_position + warp_query;
  const int position[2] = {tile.start_position + query_of(r0),
                           tile.start_position + query_of(r0 + 8)};
  const int group_last_position =
      pack == 1 ? (64 * w < count ? tile.start_position + min(64 * w + 63, count - 1) : -1)
                : cta.last_position;
  // Blocks past every row of this warpgroup are passed: they would leave each row bit-identical.
  // The block count and the first stage use are the same in every lane; read from lane 0 they are
  // so for the compiler too, and so are the loop counter, the stage indices and the wgmma
  // descriptors derived from them: ptxas keeps those in uniform registers instead of computing each
  // descriptor per thread and moving it over (R2UR) before every wgmma: 2 % fewer instructions
  // (ncu), 3 % less time at L = 8192 (H100, same call; the bits are the same).
  const int group_blocks = __shfl_sync(
      0xffffffffu,
      group_last_position < 0 ? 0
                              : min(cta.end_block, group_last_position / BN) - cta.first_block + 1,
      0);
  base = __shfl_sync(0xffffffffu, base, 0);
  const float scale_log2 = shape.scale * log2_e;
  const bool pingpong = Consumers == 2 && params.pingpong != 0;
  const std::uint32_t merge_address =
      shared_address(cta.merge_s + w * 128 * (D / 2)) + thread * 16;  // see load_merged

  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float merged_m[2] = {-INFINITY, -INFINITY}, merged_l[2] = {0.0f, 0.0f};
  // Two score arrays take turns: one holds the scores of the block in softmax (then its p), the
  // other those of the next block, in flight; the loop runs two blocks per pass so that neither
  // is ever copied into the other.
  float s_even[BN / 8][4], s_odd[BN / 8][4], alpha[2];
  std::uint32_t pa[BN / 16][4];  // P of the block whose P·V is issued next

  auto turn_begin = [&] {
    if (pingpong) named_barrier_sync(3 + w, 256);
  };
  auto turn_end = [&](int j) {  // turns 0 .. blocks + 1; warpgroup 1's last hands over to no one
    if (pingpong && !(w == 1 && j == cta.blocks + 1)) named_barrier_arrive(4 - w, 256);
  };
  // Stage uses count on from base over the CTA's items, never negative: unsigned, so that the
  // stage and phase are a mask and a shift.
  auto stage_of = [&](int j) { return static_cast<unsigned>(base + j) % S; };
  auto phase_of = [&](int j) { return (static_cast<unsigned>(base + j) / S) & 1u; };
  auto release = [&](int j) {  // the stage of block j
    __syncwarp();
    if (lane == 0) mbar_arrive(&cta.empty[stage_of(j)]);
  };
  // Shared-memory descriptors of stage 0's K and V; a stage or a k-step further is a constant
  // added to the address field (address / 16 in the low bits, which never carry: shared memory is
  // below 256 KB), in 32-bit arithmetic (wgmma::advance): the 64-bit adds it replaced were 3 % of
  // the instructions and of the time at L = 8192 (H100).
  const std::uint64_t k_desc0 = wgmma::descriptor(shared_address(cta.k_s), 16, 1024);
  // V (16 keys x D, N-major): the leading offset steps to the next 64-element panel of D, the
  // stride offset to the next 8 keys.
  const std::uint64_t v_desc0 =
      wgmma::descriptor(shared_address(cta.v_s), Tile::kv_panel_bytes, 1024);
  auto issue_qk = [&](int j, float(&scores)[BN / 8][4]) {
    const unsigned stage = stage_of(j);
    mbar_wait(&cta.full_k[stage], phase_of(j));
    const std::uint32_t k_stage = stage * (Tile::kv_bytes >> 4);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // 16 elements further along the 128-byte row, or the next 64-element panel.
      constexpr int panel_step = Tile::kv_panel_bytes >> 4;
      wgmma::rs_kmajor_m64n64k16<T>(
          reinterpret_cast<float(&)[BN / 2]>(scores), qa[kk],
          wgmma::advance(k_desc0, k_stage + (kk / 4) * panel_step + (kk % 4) * 2), kk > 0);
    }
    wgmma::commit();
  };
  auto issue_pv = [&](int j) {
    const unsigned stage = stage_of(j);
    mbar_wait(&cta.full_v[stage], phase_of(j));
    attention_device::issue_pv<T, D, BN>(acc, pa, v_desc0, stage * (Tile::kv_bytes >> 4));
  };

  // Iteration j (block first_block + j) issues O += P·V of block j - 1 and S = Q·Kᵀ of block j + 1
  // (of block j again in the last one: the loop stays uniform, and the extra product is unused),
  // then runs block j's softmax on the scores the previous iteration computed: both products run
  // under the softmax, and no wait on the tensor cores is left on its path. That needs the stage
  // of block j + 1 loaded while block j - 1's is still held: three stages or more. With two (decode
  // CTAs two per SM), iteration j issues S = Q·Kᵀ of block j and waits for it instead.
  constexpr bool ahead = S >= 3;
  // The scores of block j: s_even for even j, s_odd for odd j (with two stages, S = Q·Kᵀ of block
  // j is issued in iteration j itself, into the array its softmax reads).
  if (pingpong && w == 1) named_barrier_arrive(3, 256);          // warpgroup 0 issues first
  constexpr int chunk_size = ChunkBlocks > 0 ? ChunkBlocks : 1;  // blocks per chunk
  // Iteration j >= 1: `s` holds block j's scores (ahead) and `next` receives block j + 1's.
  auto iteration = [&](int j, float(&s)[BN / 8][4], float(&next)[BN / 8][4]) {
    const int block = cta.first_block + j;
    turn_begin();
    if constexpr (ahead) {
      issue_pv(j - 1);
      issue_qk(min(j + 1, group_blocks - 1), next);
    } else {
      issue_qk(j, s);
      issue_pv(j - 1);
    }
    turn_end(j + 1);
    // A chunk ends with block - 1 when block starts the next: its state joins the merged state
    // once its last P·V is done, and block's scores start a fresh state.
    const bool boundary = ChunkBlocks > 0 && block % chunk_size == 0;
    float chunk_m[2] = {m[0], m[1]}, chunk_l[2] = {l[0], l[1]};
    if (boundary) {
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
    }
    if constexpr (!ahead) wgmma::wait<1>();  // S = Q·Kᵀ of block j
    softmax_scores<BN>(s, m, l, alpha, block * BN, warp_first_position, position, t, scale_log2);
    if constexpr (ahead) {
      wgmma::wait<1>();  // P·V of block j - 1 (the scores of block j + 1 may still run)
    } else {
      wgmma::wait<0>();
    }
    release(j - 1);
    if (boundary) {
      join_chunk<D>((block - 1) / chunk_size, false, acc, chunk_m, chunk_l, merged_m, merged_l,
                    merge_address, scale_log2);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
    } else if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
      // Times exactly 1 leaves every bit (a NaN's payload aside, and o = NaN either way): a warp
      // none of whose rows moved its reference max skips the rescale.
      rescale_rows<D>(acc, alpha);
    }
    pack_p_fragments<T, BN>(s, pa);
    if constexpr (ahead) wgmma::wait<0>();
  };
  if (group_blocks > 0) {
    turn_begin();
    issue_qk(0, s_even);
    turn_end(0);
    wgmma::wait<0>();
    turn_begin();
    if constexpr (ahead) issue_qk(min(1, group_blocks - 1), s_odd);
    turn_end(1);
    softmax_scores<BN>(s_even, m, l, alpha, cta.first_block * BN, warp_first_position, position, t,
                       scale_log2);
    pack_p_fragments<T, BN>(s_even, pa);
    if constexpr (ahead) wgmma::wait<0>();
    if constexpr (ahead) {
      for (int j = 1; j < group_blocks; j += 2) {
        iteration(j, s_odd, s_even);
        if (j + 1 < group_blocks) iteration(j + 1, s_even, s_odd);
      }
    } else {  // each iteration's scores are its own: one array, one block per pass
      for (int j = 1; j < group_blocks; ++j) iteration(j, s_even, s_even);
    }
    turn_begin();
    issue_pv(group_blocks - 1);
    turn_end(group_blocks + 1);
    wgmma::wait<0>();
    release(group_blocks - 1);
  }
  // Blocks past this warpgroup's rows: their turns, and their stages released.
  for (int j = group_blocks > 0 ? group_blocks + 2 : 0; j <= cta.blocks + 1; ++j) {
    turn_begin();
    turn_end(j);
    if (j < 2) continue;
    mbar_wait(&cta.full_v[stage_of(j - 2)], phase_of(j - 2));
    release(j - 2);
  }
  if (group_blocks <= 0) return;  // no real row in this warpgroup

  if (Tile::split && cta.partial_base >= 0) {
    // The chunk's state of every real row: acc, m and l (summed over the quad).
    reduce_row_sums(l);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + 8 * r, query = query_of(row);
      if (query >= count) continue;
      float* partial =
          params.partials +
          (cta.partial_base +
           (static_cast<std::int64_t>(cta.chunk) * shape.heads + head_of(row)) * tile.count +
           query) *
              (D + 2);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<float2*>(partial + dt * 8 + 2 * t) =
            make_float2(acc[dt][2 * r], acc[dt][2 * r + 1]);
      }
      if (t == 0) {
        partial[D] = m[r];
        partial[D + 1] = l[r];
      }
    }
    return;
  }
  const int last_chunk =
      ChunkBlocks > 0 && !Tile::split ? (cta.first_block + group_blocks - 1) / chunk_size : 0;
  join_chunk<D>(last_chunk, true, acc, m, l, merged_m, merged_l, merge_address, scale_log2);
  // Staging for the output rows: this warpgroup's merge area (prefill), or the stages, which
  // nothing reads any more (decode: the only consumer is done, the producer loaded its last).
  named_barrier_sync(1 + w, 128);  // every thread of the warpgroup has read its merge area
  T* o_s = Tile::decode
               ? reinterpret_cast<T*>(cta.k_s) + warp * 16 * (D + 8)
               : reinterpret_cast<T*>(cta.merge_s + w * 128 * (D / 2)) + warp * 16 * (D + 8);
  if (warp_query >= count) return;  // padding only
  store_rows_reduced<T, D>(acc, merged_m, merged_l, o_s, params.o, params.lse,
                           tile.first_slot + warp_query, count - warp_query, head_of(16 * warp),
                           lane, q_stride, shape.heads, scale_log2);
}
#endif

// Prefill work item i is (tile, unit) = order[i] / units, % units (attention_prefill_order: L2
// sections, tiles longest first within each); split decode, (work item, unit) = i / units, %
// units. A unit is one head (its tile rows are queries) or, packed, the `pack` heads of a KV group
// (row r: head r / per_head, query r % per_head). Decode CTAs take one item each (blockIdx.x);
// prefill CTAs, one per SM, take item blockIdx.x and then the next untaken one from the launch's
// counter (Tile::persistent).
#ifdef BITCHECK_ATTENTION_SM90A
// The CTA's fields for work item `item`.
template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
__device__ __forceinline__ void setup_item(WsCta& cta, const WsParams<T>& params, int item) {
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  constexpr int BN = Tile::keys;
  const AttentionShape shape = params.shape;
  if constexpr (Tile::persistent) item = params.order[item];
  const int unit = item % params.units;
  int tile_index = item / params.units;
  cta.chunk = 0;
  cta.partial_base = -1;
  if constexpr (Tile::split) {
    const AttentionWorkItem work = params.items[tile_index];
    tile_index = work.tile;
    cta.chunk = work.chunk;
    cta.partial_base = work.partial_base;
  }
  cta.tile = params.tiles[tile_index];
  cta.pack = params.pack;
  cta.per_head = Tile::rows / cta.pack;
  cta.first_head = unit * cta.pack;
  cta.count = min(cta.tile.count, cta.per_head);  // the launcher keeps tile.count <= per_head
  cta.kv_head = cta.first_head / (shape.heads / shape.kv_heads);
  cta.last_position = cta.tile.start_position + cta.count - 1;
  cta.last_block = cta.last_position / BN;
  cta.first_block = Tile::split ? cta.chunk * ChunkBlocks : 0;
  cta.end_block =
      Tile::split ? min(cta.last_block, cta.first_block + ChunkBlocks - 1) : cta.last_block;
  cta.blocks = cta.end_block - cta.first_block + 1;
}
#endif

template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
__global__ void __launch_bounds__(WsTile<T, D, Consumers, ChunkBlocks, Stages>::threads,
                                  WsTile<T, D, Consumers, ChunkBlocks, Stages>::ctas_per_sm)
    forward_ws_kernel(const __grid_constant__ CUtensorMap q_map,
                      const __grid_constant__ CUtensorMap k_map,
                      const __grid_constant__ CUtensorMap v_map, const WsParams<T> params) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  constexpr int S = Tile::stages;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  WsCta cta;
  cta.q_s = shared;
  cta.k_s = cta.q_s + Consumers * Tile::q_bytes;  // [stages][panels][keys][128 bytes]
  cta.v_s = cta.k_s + S * Tile::kv_bytes;
  cta.merge_s = reinterpret_cast<float*>(cta.v_s + S * Tile::kv_bytes);
  cta.full_k = reinterpret_cast<std::uint64_t*>(cta.v_s + S * Tile::kv_bytes + Tile::merge_bytes);
  cta.full_v = cta.full_k + S;
  cta.empty = cta.full_v + S;
  cta.q_full = cta.empty + S;
  cta.q_empty = cta.q_full + 1;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&cta.full_k[s], 1);
      mbar_init(&cta.full_v[s], 1);
      mbar_init(&cta.empty[s], 4 * Consumers);  // lane 0 of every consumer warp
    }
    mbar_init(cta.q_full, 1);
    mbar_init(cta.q_empty, 4 * Consumers);
    mbar_init_fence();
  }
  __syncthreads();

  // A persistent CTA takes item blockIdx.x first, then whichever the counter hands its producer
  // (gridDim.x + the number taken before); the k-th of its items has its blocks at stage uses
  // base, base + 1, ..., counted over the CTA's items in order. Which CTA computes an item, and
  // when, is scheduling: no bit depends on it.
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    registers_decrease<Tile::producer_registers>();
    if (threadIdx.x >= warp_size) return;
    const int lane = static_cast<int>(threadIdx.x);
    if constexpr (Tile::persistent) {
      // The grid never exceeds the items, so every CTA has a first one and takes from the counter
      // until it runs out, once past the end: item_count takes in all, the last of them (taken =
      // item_count - 1) resets the counter for the next launch.
      int k = 0;
      for (int item = blockIdx.x, base = 0; item >= 0; ++k) {
        setup_item<T, D, Consumers, ChunkBlocks, Stages>(cta, params, item);
        produce_queries<T, D, Consumers, ChunkBlocks, Stages>(cta, &q_map, k, item, lane);
        produce<T, D, Consumers, ChunkBlocks, Stages>(cta, &k_map, &v_map, params, lane, base);
        base += cta.blocks;
        int taken = 0;
        if (lane == 0) {
          taken = atomicAdd(params.next_item, 1);
          if (taken == params.item_count - 1) atomicExch(params.next_item, 0);
        }
        item = static_cast<int>(gridDim.x) + __shfl_sync(0xffffffffu, taken, 0);
        if (item >= params.item_count) item = -1;
      }
      produce_queries<T, D, Consumers, ChunkBlocks, Stages>(cta, &q_map, k, -1, lane);  // none left
    } else {
      setup_item<T, D, Consumers, ChunkBlocks, Stages>(cta, params, blockIdx.x);
      produce<T, D, Consumers, ChunkBlocks, Stages>(cta, &k_map, &v_map, params, lane, 0);
    }
  } else {
    registers_increase<Tile::consumer_registers>();
    const int w = warpgroup - 1, thread = static_cast<int>(threadIdx.x) - 128 * warpgroup;
    if constexpr (Tile::persistent) {
      for (int k = 0, base = 0;; ++k) {
        mbar_wait(cta.q_full, k & 1);  // the item's index, and its Q loaded by TMA
        // Lane 0 alone reads the index, the lane that arrives on q_empty once the warp holds its Q
        // rows, after which the producer may overwrite it: the read is ordered before that arrive
        // by the lane's own program order, and compute-sanitizer's racecheck sees it so (with
        // every lane reading it reported a hazard against the producer's next write).
        int item = 0;
        if (thread % warp_size == 0) item = *static_cast<volatile int*>(item_slot(cta));
        item = __shfl_sync(0xffffffffu, item, 0);
        if (item < 0) break;
        setup_item<T, D, Consumers, ChunkBlocks, Stages>(cta, params, item);
        consume<T, D, Consumers, ChunkBlocks, Stages>(cta, params, w, thread, base, k);
        base += cta.blocks;
      }
    } else {
      setup_item<T, D, Consumers, ChunkBlocks, Stages>(cta, params, blockIdx.x);
      consume<T, D, Consumers, ChunkBlocks, Stages>(cta, params, w, thread, 0, 0);
    }
  }
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

CUtensorMapDataType tensor_map_type(DeviceDType dtype) {
  return dtype == DeviceDType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

template <typename T, int D, int Consumers, int ChunkBlocks, int Stages>
void launch_ws(const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
               WsParams<T> params, std::int64_t ctas, CUstream_st* stream) {
  using Tile = WsTile<T, D, Consumers, ChunkBlocks, Stages>;
  static_assert(Tile::rows == 64 * Consumers && Tile::split == (Consumers == 1 && ChunkBlocks > 0),
                "a decode launch is split exactly when it is chunked");
  static std::once_flag configured;
  std::call_once(configured, [] {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(forward_ws_kernel<T, D, Consumers, ChunkBlocks, Stages>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tile::shared_bytes));
  });
  if (ctas <= 0) return;
  if (ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention forward: work items * heads exceeds the grid");
  params.item_count = static_cast<int>(ctas);
  std::int64_t grid = ctas;
  if constexpr (Tile::persistent) {  // one CTA per SM, each taking items in turn
    grid = std::min<std::int64_t>(ctas, attention_multiprocessor_count());
  }
  forward_ws_kernel<T, D, Consumers, ChunkBlocks, Stages>
      <<<static_cast<unsigned>(grid), Tile::threads, Tile::shared_bytes, stream>>>(q_map, k_map,
                                                                                   v_map, params);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

// The tensor maps of a launch: K and V, and Q as [slots, heads * dim] for the persistent prefill
// CTAs' TMA loads (64-row boxes).
struct WsTensorMaps {
  CUtensorMap k, v, q;
};
WsTensorMaps ws_tensor_maps(const AttentionWsLaunch& launch) {
  const AttentionShape shape = launch.shape;
  const CUtensorMapDataType type = tensor_map_type(launch.dtype);
  const std::int64_t kv_width = static_cast<std::int64_t>(shape.kv_heads) * shape.dim;
  return {make_tensor_map(type, launch.k_cache, launch.cache_rows, kv_width, 64),
          make_tensor_map(type, launch.v_cache, launch.cache_rows, kv_width, 64),
          make_tensor_map(type, launch.q, launch.query_rows,
                          static_cast<std::int64_t>(shape.heads) * shape.dim, 64)};
}

// The kernel's parameters of `launch` (item_count is set by launch_ws).
template <typename T>
WsParams<T> ws_params(const AttentionWsLaunch& launch) {
  const AttentionShape shape = launch.shape;
  return {static_cast<const T*>(launch.q),
          static_cast<const T*>(launch.v_cache),
          static_cast<T*>(launch.o),
          launch.lse,
          launch.tiles,
          launch.items,
          launch.order,
          launch.partials,
          shape,
          launch.decode && launch.pack > 1 ? shape.kv_heads : shape.heads,
          launch.decode ? launch.pack : 1,
          launch.pingpong ? 1 : 0,
          0,
          launch.next_item};
}

// body(T{}) with T the launch's element type, bf16 or fp16.
template <typename F>
void dispatch_ws(DeviceDType dtype, F&& body) {
  if (dtype == DeviceDType::bf16) {
    body(__nv_bfloat16{});
  } else {
    body(__half{});
  }
}

// The only head dim of the warp-specialized kernels.
constexpr int ws_dim = 128;

}  // namespace
}  // namespace bitcheck::cuda
