// attention kernels and launchers (see attention_kernels.h).
//
// What makes the fixed-order reduction independent of batch, position in the batch, padding,
// chunking and decode: every query row reduces its keys in KV blocks of a fixed size
// (attention_mma_kv_block) aligned to position 0 of its sequence, blocks visited from 0 upward,
// each key read from the KV cache that the invocation wrote before attending. Decode is a tile of
// one query in the same kernel. Which other queries share the CTA (the tile, and its size) never
// changes a row's arithmetic: the tensor-core mma computes each output element from its own row
// and column only, every row's softmax max and sum use the same per-lane order and quad shuffle
// pattern, and the causal mask is per element by the row's own position. Blocks past a row's
// position are fully masked (p = 0, rescale factor exactly 1), so they leave the row's state
// bit-identical; that is why a warp may skip a block past all of its rows and a CTA never loads a
// block past its last query. No split-KV in the fixed-order path.
//
// Forward products: on sm_90 (attention_forward_uses_wgmma) wgmma, elsewhere mma.sync, chosen per
// device only; both kernels share the per-row softmax (softmax_block) and epilogue (store_rows).
//
// The backward takes whole sequences and uses no atomics (only the named control,
// dq_atomic_scratch, does). Tensor-core path (bf16/fp16, head dim 64/128; attention_cuda.cpp
// selects it with tensor_core_backward, on unless BITCHECK_ATTENTION_BACKWARD=simt; on sm_90 the
// wgmma kernels of attention_backward_wgmma.cu, elsewhere the mma.sync ones here): dq of a query
// row sums its keys in blocks of attention_mma_kv_block from position 0 up to its own block, in
// order; dk and dv of a key row sum, for each head of its group in order, the query blocks of the
// same size from the key's own block to the end of the sequence, in order; everything in fp32.
// Tiles are 64 rows of one sequence starting at a multiple of 64, so which rows share a warp or
// CTA, and which blocks a warp visits, follow from the sequence alone; and as in the forward the
// mma gives each element from its own row and column, the causal mask is per element (masked p and
// ds are exact zeros), and the softmax and ds arithmetic is explicitly rounded, so no row's bits
// depend on a neighbour. SIMT path (fp32, other head dims, and bf16/fp16 under
// BITCHECK_ATTENTION_BACKWARD=simt): one warp per query (dq over keys in order) and per key (dk, dv
// over queries in order).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "common/async_copy.cuh"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/tensor_map.cuh"
#include "common/wgmma.cuh"
#include "core/paths.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BITCHECK_ATTENTION_SM90A 1
#endif

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

constexpr int simt_warps = 4;  // warps per CTA in the SIMT kernels
constexpr int simt_max_dim = 128;
constexpr int simt_dims_per_lane = simt_max_dim / warp_size;

// Butterfly reductions: every lane ends with the same bits (a + b == b + a), in a fixed pattern.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---------------------------------------------------------------------------------------------
// KV cache write: one CTA per slot.
template <typename T>
__global__ void write_cache_kernel(const T* k, const T* v, T* k_cache, T* v_cache,
                                   const int* cache_rows, int row_width) {
  const int row = cache_rows[blockIdx.x];
  if (row < 0) return;
  for (int c = threadIdx.x; c < row_width; c += blockDim.x) {
    k_cache[static_cast<std::int64_t>(row) * row_width + c] =
        k[static_cast<std::int64_t>(blockIdx.x) * row_width + c];
    v_cache[static_cast<std::int64_t>(row) * row_width + c] =
        v[static_cast<std::int64_t>(blockIdx.x) * row_width + c];
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core forward, flash-attention-2 style, on mma.sync m16n8k16 with fp32 accumulation (the
// same instructions in the sm_90a code and the compute_80 PTX, so no arch-specific path). A CTA of
// 8 warps takes up to 128 queries of one segment and one head; each warp owns 16 query rows and
// keeps their Q A-fragments in registers for the whole KV loop. K and V blocks of 64 keys stream
// through a two-stage cp.async pipeline: block b + 1 is in flight while block b is computed, one
// barrier per block. Shared rows are padded by 16 bytes, so the 8 rows an ldmatrix phase reads
// start in 8 different 16-byte bank groups (no bank conflicts). S = Q·Kᵀ stays in registers,
// becomes P (rounded to the input dtype for P·V, as flash-attention does) and is fed straight back
// as the A-fragment of O += P·V; V's B-fragments come from ldmatrix.trans.
template <typename T, int D>
struct ForwardTile {
  static constexpr int queries = attention_mma_tile_queries;
  static constexpr int keys = attention_mma_kv_block;
  static constexpr int warps = queries / 16;
  static constexpr int threads = warps * warp_size;
  static constexpr int stride = D + 8;  // elements per shared row
  static constexpr int stages = 2;
  static constexpr int q_elements = queries * stride;
  static constexpr int kv_elements = keys * stride;  // one stage of K or of V
  static constexpr int shared_bytes =
      (q_elements + 2 * stages * kv_elements) * static_cast<int>(sizeof(T));
  static_assert(queries % 16 == 0 && keys % 16 == 0 && D % 16 == 0,
                "mma tiles are 16 rows, 16 keys, 16 dims");
};

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Like ldmatrix_x4 (attention_device.cuh), transposed: lane l receives rows 2(l%4) and 2(l%4)+1
// of column l/4 of each matrix.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Every thread of the CTA copies its share of `rows` rows of D elements (row r at source +
// r * row_stride) into shared rows of D + 8; rows at or past valid_rows become zeros, so padding
// never reads past the tensor and never holds stale or uninitialized values.
template <typename T, int D, int rows, int threads>
__device__ __forceinline__ void load_rows_async(T* shared, const T* source, std::int64_t row_stride,
                                                int valid_rows) {
  constexpr int chunks = D / 8, stride = D + 8;
  static_assert(rows * chunks % threads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < rows * chunks / threads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * threads, row = chunk / chunks,
              column = chunk % chunks * 8;
    const bool valid = row < valid_rows;
    copy_async_16(shared + row * stride + column,
                  valid ? source + row * row_stride + column : source, valid);
  }
}

// Grid: one CTA per (tile, head), heads of a tile adjacent (they share K/V through L2). Warp w
// owns tile rows 16w..16w+15; lane l holds rows l/4 and l/4 + 8, key (or dim) columns 2(l%4) and
// 2(l%4) + 1 of every 8-wide mma tile. The softmax state m (row max of raw scores) and l (this
// lane's share of the row sum, summed over the quad at the end) is per row.
template <typename T, int D>
__global__ void __launch_bounds__(ForwardTile<T, D>::threads, 1)
    forward_mma_kernel(const T* q, const T* k_cache, const T* v_cache, T* o, float* lse,
                       const AttentionTile* tiles, AttentionShape shape) {
  using Tile = ForwardTile<T, D>;
  constexpr int BN = Tile::keys, stride = Tile::stride, element_bytes = static_cast<int>(sizeof(T));
  constexpr int row_bytes = stride * element_bytes, stage_bytes = Tile::kv_elements * element_bytes;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* q_s = reinterpret_cast<T*>(shared_raw);  // the Q tile; afterwards each warp's output rows
  T* k_s = q_s + Tile::q_elements;            // [stages][keys][stride]
  T* v_s = k_s + Tile::stages * Tile::kv_elements;

  const AttentionTile tile = tiles[blockIdx.x / shape.heads];
  const int h = static_cast<int>(blockIdx.x % shape.heads),
            kv_head = h / (shape.heads / shape.kv_heads);
  const int warp = static_cast<int>(threadIdx.x) / warp_size,
            lane = static_cast<int>(threadIdx.x) % warp_size;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const int last_position = tile.start_position + tile.count - 1, last_block = last_position / BN;
  const T* q_tile = q + tile.first_slot * q_stride + h * D;
  const T* k_sequence = k_cache + tile.cache_base * kv_stride + kv_head * D;  // key of position 0
  const T* v_sequence = v_cache + tile.cache_base * kv_stride + kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the tile's last query become zeros
    const int valid_keys = last_position - block * BN + 1;
    load_rows_async<T, D, BN, Tile::threads>(k_s + stage * Tile::kv_elements,
                                             k_sequence + block * BN * kv_stride, kv_stride,
                                             valid_keys);
    load_rows_async<T, D, BN, Tile::threads>(v_s + stage * Tile::kv_elements,
                                             v_sequence + block * BN * kv_stride, kv_stride,
                                             valid_keys);
  };

  load_rows_async<T, D, Tile::queries, Tile::threads>(q_s, q_tile, q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();
  copy_async_wait_all();
  __syncthreads();

  const int r0 = warp * 16;
  std::uint32_t qa[D / 16][4];
  {
    // A-fragment of rows r0..r0+15, dims 16kc..16kc+15: matrices (rows 0-7 | 8-15) x (dims 0-7 |
    // 8-15).
    const unsigned q_lane =
        shared_address(q_s) + ((r0 + (lane & 15)) * stride + (lane >> 4) * 8) * element_bytes;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) ldmatrix_x4(qa[kc], q_lane + kc * 16 * element_bytes);
  }
  // K B-fragments for key tiles 2j, 2j + 1: matrices (keys 0-7, dims 0-7 | 8-15), (keys 8-15, ...).
  const unsigned k_lane =
      shared_address(k_s) +
      (((lane & 7) + ((lane >> 4) << 3)) * stride + ((lane >> 3) & 1) * 8) * element_bytes;
  // V B-fragments (ldmatrix.trans) for dim tiles 2j, 2j + 1: (keys 0-7 | 8-15, dims 0-7), (...,
  // dims 8-15).
  const unsigned v_lane =
      shared_address(v_s) + ((lane & 15) * stride + (lane >> 4) * 8) * element_bytes;

  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  // Rows past tile.count are padding: never stored, so they need no block of their own.
  const int warp_last_position =
      r0 < tile.count ? tile.start_position + min(r0 + 15, tile.count - 1) : -1;
  const float scale_log2 = shape.scale * log2_e;

  for (int block = 0; block <= last_block; ++block) {
    if (block > 0) {
      copy_async_wait_all();  // this thread's copies of the block have landed
      __syncthreads();        // everyone's have, and nobody still reads the other stage
    }
    if (block < last_block) load_block(block + 1, (block + 1) & 1);
    copy_async_commit();
    // A block past every real row of this warp would leave each row bit-identical: skip it.
    if (block * BN > warp_last_position) continue;
    const unsigned stage_offset = static_cast<unsigned>((block & 1) * stage_bytes);

    float s[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int pair = 0; pair < BN / 16; ++pair) {
        std::uint32_t kb[4];
        ldmatrix_x4(kb, k_lane + stage_offset + pair * 16 * row_bytes + kc * 16 * element_bytes);
        mma_16816<T>(s[2 * pair], qa[kc], kb[0], kb[1]);
        mma_16816<T>(s[2 * pair + 1], qa[kc], kb[2], kb[3]);
      }
    }
    softmax_block<BN, D>(s, acc, m, l, block * BN, warp_first_position, position, t, scale_log2);
    // O += P·V: the accumulator layout of S tiles 2kc, 2kc + 1 is the A-fragment layout of keys
    // 16kc..16kc+15, so P never leaves registers.
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      const std::uint32_t pa[4] = {pack_pair<T>(s[2 * kc][0], s[2 * kc][1]),
                                   pack_pair<T>(s[2 * kc][2], s[2 * kc][3]),
                                   pack_pair<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                   pack_pair<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int pair = 0; pair < D / 16; ++pair) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb,
                          v_lane + stage_offset + kc * 16 * row_bytes + pair * 16 * element_bytes);
        mma_16816<T>(acc[2 * pair], pa, vb[0], vb[1]);
        mma_16816<T>(acc[2 * pair + 1], pa, vb[2], vb[3]);
      }
    }
  }
  if (r0 >= tile.count) return;  // padding only; no barrier follows

  store_rows<T, D>(acc, m, l, q_s + r0 * stride, o, lse, tile.first_slot + r0, tile.count - r0, h,
                   lane, q_stride, shape.heads, scale_log2);
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// SIMT forward: one warp per (query, head, split). Lane j of a 32-key step owns key j's score (a
// sequential dot product); the value update walks the step's keys in order, each lane owning
// dims lane, lane + 32, ... The online-softmax rescale happens once per kv_block keys.
template <typename T>
__global__ void forward_simt_kernel(const T* q, const T* k_cache, const T* v_cache, T* o,
                                    float* lse, const AttentionToken* tokens, int token_count,
                                    AttentionShape shape, int kv_block, int splits,
                                    float* scratch) {
  __shared__ float q_shared[simt_warps][simt_max_dim];
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.heads * splits) return;
  const int split = static_cast<int>(item % splits),
            h = static_cast<int>((item / splits) % shape.heads);
  const AttentionToken token = tokens[item / splits / shape.heads];
  const int D = shape.dim, kv_head = h / (shape.heads / shape.kv_heads);
  const std::int64_t kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const T* q_row = q + (static_cast<std::int64_t>(token.slot) * shape.heads + h) * D;
  for (int d = lane; d < D; d += warp_size) q_shared[warp][d] = to_float(q_row[d]);
  __syncwarp();
  const int blocks = token.position / kv_block + 1, per_split = (blocks + splits - 1) / splits;
  const int first_block = split * per_split, end_block = min(blocks, first_block + per_split);
  float m = -INFINITY, l = 0.0f, acc[simt_dims_per_lane] = {};
  for (int block = first_block; block < end_block; ++block) {
    float p[simt_max_dim / warp_size];
    float block_max = -INFINITY;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      const int key = block * kv_block + step * warp_size + lane;
      float score = -INFINITY;
      if (key <= token.position) {
        const T* key_row = k_cache + (token.cache_base + key) * kv_stride + kv_head * D;
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += q_shared[warp][d] * to_float(key_row[d]);
        score = dot * shape.scale;
      }
      p[step] = score;
      block_max = fmaxf(block_max, score);
    }
    block_max = warp_max(block_max);
    const float m_new = fmaxf(m, block_max), alpha = expf(m - m_new);
    float lane_sum = 0.0f;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      p[step] = expf(p[step] - m_new);
      lane_sum += p[step];
    }
    l = l * alpha + warp_sum(lane_sum);
    m = m_new;
    for (int i = 0; i < simt_dims_per_lane; ++i) acc[i] *= alpha;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      for (int j = 0; j < warp_size; ++j) {
        const int key = block * kv_block + step * warp_size + j;
        const float pj = __shfl_sync(0xffffffffu, p[step], j);
        if (key > token.position) break;
        const T* value_row = v_cache + (token.cache_base + key) * kv_stride + kv_head * D;
        for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
          acc[i] += pj * to_float(value_row[lane + i * warp_size]);
      }
    }
  }
  const std::int64_t row = static_cast<std::int64_t>(token.slot) * shape.heads + h;
  if (splits == 1) {
    for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
      o[row * D + lane + i * warp_size] = from_float<T>(acc[i] / l);
    if (lane == 0) lse[row] = m + logf(l);
    return;
  }
  float* partial = scratch + (item / splits * splits + split) * (D + 2);
  for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
    partial[lane + i * warp_size] = acc[i];
  if (lane == 0) {
    partial[D] = m;
    partial[D + 1] = l;
  }
}

// Split-KV combine: one warp per (query, head), splits in order, rescaled to the largest max.
template <typename T>
__global__ void combine_kernel(const float* scratch, T* o, float* lse, const AttentionToken* tokens,
                               int token_count, AttentionShape shape, int splits) {
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.heads) return;
  const int D = shape.dim, h = static_cast<int>(item % shape.heads);
  const AttentionToken token = tokens[item / shape.heads];
  const float* partial = scratch + item * splits * (D + 2);
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, partial[s * (D + 2) + D]);
  float l = 0.0f, acc[simt_dims_per_lane] = {};
  for (int s = 0; s < splits; ++s) {
    const float* part = partial + s * (D + 2);
    const float weight = expf(part[D] - m);
    l += part[D + 1] * weight;
    for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
      acc[i] += part[lane + i * warp_size] * weight;
  }
  const std::int64_t row = static_cast<std::int64_t>(token.slot) * shape.heads + h;
  for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
    o[row * D + lane + i * warp_size] = from_float<T>(acc[i] / l);
  if (lane == 0) lse[row] = m + logf(l);
}

// ---------------------------------------------------------------------------------------------
// Backward (whole sequences; a token's sequence starts at slot cache_base).
// delta[slot, h] = sum_d do * o, lanes over dims then a butterfly sum.
template <typename T>
__global__ void delta_kernel(const T* o, const T* dout, float* delta, const AttentionToken* tokens,
                             int token_count, AttentionShape shape) {
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.heads) return;
  const int h = static_cast<int>(item % shape.heads);
  const std::int64_t row =
      static_cast<std::int64_t>(tokens[item / shape.heads].slot) * shape.heads + h;
  float sum = 0.0f;
  for (int d = lane; d < shape.dim; d += warp_size)
    sum += to_float(dout[row * shape.dim + d]) * to_float(o[row * shape.dim + d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// p and ds of query row (q, do, lse, delta) against key row (k, v): sequential dot products.
struct ScoreGrad {
  float p, ds;
};
template <typename Q, typename T>
__device__ __forceinline__ ScoreGrad score_grad(const Q* q, const Q* dout, const T* k, const T* v,
                                                int D, float scale, float lse, float delta) {
  float dot = 0.0f, dp = 0.0f;
  for (int d = 0; d < D; ++d) {
    dot += to_float(q[d]) * to_float(k[d]);
    dp += to_float(dout[d]) * to_float(v[d]);
  }
  const float p = expf(dot * scale - lse);
  return {p, p * (dp - delta)};
}

// dq: one warp per (query, head); keys 0..position in order, 32 per step (lane j scores key j),
// dq += ds_j k_j walked in key order. With `atomic_scratch`: the control, one warp per (query,
// head, 64-key block) adding its block's partial with atomicAdd, in whatever order warps finish.
template <typename T>
__global__ void dq_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                          const float* delta, T* dq, const AttentionToken* tokens, int token_count,
                          AttentionShape shape, int blocks_per_query, float* atomic_scratch) {
  __shared__ float q_shared[simt_warps][simt_max_dim], do_shared[simt_warps][simt_max_dim];
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.heads * blocks_per_query) return;
  const int kv_block = static_cast<int>(item % blocks_per_query),
            h = static_cast<int>((item / blocks_per_query) % shape.heads);
  const AttentionToken token = tokens[item / blocks_per_query / shape.heads];
  const int D = shape.dim, kv_head = h / (shape.heads / shape.kv_heads);
  const std::int64_t row = static_cast<std::int64_t>(token.slot) * shape.heads + h,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  int first_key = 0, last_key = token.position;
  if (atomic_scratch) {
    first_key = kv_block * attention_mma_kv_block;
    last_key = min(token.position, first_key + attention_mma_kv_block - 1);
    if (first_key > token.position) return;
  }
  for (int d = lane; d < D; d += warp_size) {
    q_shared[warp][d] = to_float(q[row * D + d]);
    do_shared[warp][d] = to_float(dout[row * D + d]);
  }
  __syncwarp();
  const float row_lse = lse[row], row_delta = delta[row];
  float acc[simt_dims_per_lane] = {};
  for (int base = first_key; base <= last_key; base += warp_size) {
    const int key = base + lane;
    float ds = 0.0f;
    if (key <= last_key) {
      const std::int64_t key_row = (token.cache_base + key) * kv_stride + kv_head * D;
      ds = score_grad(q_shared[warp], do_shared[warp], k + key_row, v + key_row, D, shape.scale,
                      row_lse, row_delta)
               .ds;
    }
    for (int j = 0; j < warp_size && base + j <= last_key; ++j) {
      const float ds_j = __shfl_sync(0xffffffffu, ds, j);
      const T* key_row = k + (token.cache_base + base + j) * kv_stride + kv_head * D;
      for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
        acc[i] += ds_j * to_float(key_row[lane + i * warp_size]);
    }
  }
  for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i) {
    const int d = lane + i * warp_size;
    if (atomic_scratch) {
      atomicAdd(&atomic_scratch[row * D + d], acc[i] * shape.scale);  // bitcheck-control: atomic-dq
    } else {
      dq[row * D + d] = from_float<T>(acc[i] * shape.scale);
    }
  }
}

template <typename T>
__global__ void round_dq_kernel(const float* scratch, T* dq, const AttentionToken* tokens,
                                int token_count, AttentionShape shape) {
  const std::int64_t per_token = static_cast<std::int64_t>(shape.heads) * shape.dim;
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= token_count * per_token) return;
  const std::int64_t at =
      static_cast<std::int64_t>(tokens[index / per_token].slot) * per_token + index % per_token;
  dq[at] = from_float<T>(scratch[at]);
}

// dk, dv: one warp per (key, kv head); for each head of the group in order, queries from the key's
// position to the end of the sequence in order (lane i scores query i of a 32-query step).
template <typename T>
__global__ void dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                            const float* delta, T* dk, T* dv, const AttentionToken* tokens,
                            int token_count, AttentionShape shape) {
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.kv_heads) return;
  const int kv_head = static_cast<int>(item % shape.kv_heads), group = shape.heads / shape.kv_heads,
            D = shape.dim;
  const AttentionToken token = tokens[item / shape.kv_heads];
  const std::int64_t kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const std::int64_t key_row = static_cast<std::int64_t>(token.slot) * kv_stride + kv_head * D;
  float dk_acc[simt_dims_per_lane] = {}, dv_acc[simt_dims_per_lane] = {};
  for (int member = 0; member < group; ++member) {
    const int h = kv_head * group + member;
    for (int base = token.position; base < token.sequence_length; base += warp_size) {
      const int query = base + lane;
      ScoreGrad grad{0.0f, 0.0f};
      if (query < token.sequence_length) {
        const std::int64_t row =
            static_cast<std::int64_t>(token.cache_base + query) * shape.heads + h;
        grad = score_grad(q + row * D, dout + row * D, k + key_row, v + key_row, D, shape.scale,
                          lse[row], delta[row]);
      }
      for (int j = 0; j < warp_size && base + j < token.sequence_length; ++j) {
        const float p_j = __shfl_sync(0xffffffffu, grad.p, j),
                    ds_j = __shfl_sync(0xffffffffu, grad.ds, j);
        const std::int64_t row =
            static_cast<std::int64_t>(token.cache_base + base + j) * shape.heads + h;
        for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i) {
          dv_acc[i] += p_j * to_float(dout[row * D + lane + i * warp_size]);
          dk_acc[i] += ds_j * to_float(q[row * D + lane + i * warp_size]);
        }
      }
    }
  }
  for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i) {
    dk[key_row + lane + i * warp_size] = from_float<T>(dk_acc[i] * shape.scale);
    dv[key_row + lane + i * warp_size] = from_float<T>(dv_acc[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core backward, flash-attention-2 style without atomics, on the forward's mma.sync
// m16n8k16 (fp32 accumulation), ldmatrix and two-stage cp.async pipeline. Two kernels over tiles
// of 64 rows of one whole sequence (start positions multiples of 64, so a row's warp and CTA
// neighbours are fixed by its own sequence); each warp owns 16 rows. Every output element is the
// mma of its own row with the streamed block, accumulated block after block in a fixed order, so
// no row ever mixes with another. P and dS are rounded to the input dtype as mma A-fragments, as
// flash-attention does; all softmax and dS arithmetic is explicitly rounded (__fmaf_rn,
// __fmul_rn, __fsub_rn) so FMA contraction cannot differ between rows held in different
// registers. Masked elements are set to exactly p = 0 and ds = 0.
//
// ldmatrix lane addresses (see ldmatrix_x4): with a_lane_offset, rows (lane & 15) and columns
// (lane >> 4) * 8 of a 16x16 block give the A-fragment of a row-major [m][k] block, or with .trans
// the B-fragments of two 8-wide n tiles of a [k][n] block; with b_lane_offset, rows (lane & 7) +
// (lane >> 4) * 8 and columns ((lane >> 3) & 1) * 8 give the B-fragments of two n tiles of an
// [n][k] block.
template <typename T, int D>
struct BackwardTile {
  static constexpr int rows =
      attention_mma_backward_tile;                      // queries (dq) or keys (dk, dv) of a CTA
  static constexpr int block = attention_mma_kv_block;  // keys (dq) or queries (dk, dv) per step
  static constexpr int warps = rows / 16;
  static constexpr int threads = warps * warp_size;
  static constexpr int stride = D + 8;
  static constexpr int elements = rows * stride;  // one shared tile or block (rows == block)
  // dq: Q, dO and two stages of K and V. dk/dv: K, V, two stages of Q and dO, and of lse, delta.
  static constexpr int dq_shared_bytes = 6 * elements * static_cast<int>(sizeof(T));
  static constexpr int dkdv_shared_bytes =
      dq_shared_bytes + 2 * 2 * block * static_cast<int>(sizeof(float));
  static_assert(rows == block && threads == 2 * block,
                "shared tiles are interchangeable; a thread per lse or delta");
  static_assert(D % 16 == 0, "mma tiles are 16 dims");
};

template <int stride, int element_bytes>
__device__ __forceinline__ unsigned a_lane_offset(int lane) {
  return static_cast<unsigned>(((lane & 15) * stride + (lane >> 4) * 8) * element_bytes);
}
template <int stride, int element_bytes>
__device__ __forceinline__ unsigned b_lane_offset(int lane) {
  return static_cast<unsigned>(
      (((lane & 7) + ((lane >> 4) << 3)) * stride + ((lane >> 3) & 1) * 8) * element_bytes);
}

// The A-fragment of columns 16kc..16kc+15 from the accumulators of 8-column tiles 2kc, 2kc + 1.
template <typename T>
__device__ __forceinline__ void accumulator_to_a(std::uint32_t (&a)[4], const float (&lo)[4],
                                                 const float (&hi)[4]) {
  a[0] = pack_pair<T>(lo[0], lo[1]);
  a[1] = pack_pair<T>(lo[2], lo[3]);
  a[2] = pack_pair<T>(hi[0], hi[1]);
  a[3] = pack_pair<T>(hi[2], hi[3]);
}

// dq: one CTA per (query tile, head), heads of a tile adjacent. Warp w owns tile rows 16w..16w+15
// (lane: rows g, g + 8). Key blocks 0..tile's block stream through shared memory in order; per
// block S = Q·Kᵀ and dP = dO·Vᵀ (Q, dO fragments re-read from shared), p = 2^(s·scale·log2 e −
// lse·log2 e), ds = p·(dp − delta), dQ += dS·K. Tiles are aligned to the blocks, so only the tile's
// own (last) block needs the causal mask, and only a warp of padding rows skips blocks.
// The two products of one warp's 16 rows that both backward kernels form side by side, over the
// head dim in 16-wide steps: s = A1·B1ᵀ and dp = A2·B2ᵀ for N columns (N / 16 pairs of B rows from
// b_offset on). A fragments come from a1_lane / a2_lane (rows of this warp), B fragments from
// b1_lane / b2_lane; each element's chain is its kc steps in order.
template <typename T, int D, int N, int row_bytes, int element_bytes>
__device__ __forceinline__ void paired_products(float (&s)[N / 8][4], float (&dp)[N / 8][4],
                                                unsigned a1_lane, unsigned a2_lane,
                                                unsigned b1_lane, unsigned b2_lane,
                                                unsigned b_offset) {
#pragma unroll
  for (int nt = 0; nt < N / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.0f;
  }
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    std::uint32_t a1[4], a2[4];
    ldmatrix_x4(a1, a1_lane + kc * 16 * element_bytes);
    ldmatrix_x4(a2, a2_lane + kc * 16 * element_bytes);
#pragma unroll
    for (int pair = 0; pair < N / 16; ++pair) {
      const unsigned at = b_offset + pair * 16 * row_bytes + kc * 16 * element_bytes;
      std::uint32_t b1[4], b2[4];
      ldmatrix_x4(b1, b1_lane + at);
      mma_16816<T>(s[2 * pair], a1, b1[0], b1[1]);
      mma_16816<T>(s[2 * pair + 1], a1, b1[2], b1[3]);
      ldmatrix_x4(b2, b2_lane + at);
      mma_16816<T>(dp[2 * pair], a2, b2[0], b2[1]);
      mma_16816<T>(dp[2 * pair + 1], a2, b2[2], b2[3]);
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(BackwardTile<T, D>::threads, 2)
    dq_mma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                  const float* delta, T* dq, const AttentionBackwardTile* tiles,
                  AttentionShape shape) {
  using Tile = BackwardTile<T, D>;
  constexpr int BN = Tile::block, stride = Tile::stride,
                element_bytes = static_cast<int>(sizeof(T));
  constexpr int row_bytes = stride * element_bytes, stage_bytes = Tile::elements * element_bytes;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* q_s = reinterpret_cast<T*>(shared_raw);  // the Q tile; afterwards each warp's dq rows
  T* do_s = q_s + Tile::elements;
  T* k_s = do_s + Tile::elements;  // [stages][keys][stride]
  T* v_s = k_s + 2 * Tile::elements;

  const AttentionBackwardTile tile = tiles[blockIdx.x / shape.heads];
  const int h = static_cast<int>(blockIdx.x % shape.heads),
            kv_head = h / (shape.heads / shape.kv_heads);
  const int warp = static_cast<int>(threadIdx.x) / warp_size,
            lane = static_cast<int>(threadIdx.x) % warp_size;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const int last_position = tile.start_position + tile.count - 1, last_block = last_position / BN;
  const T* k_sequence = k + tile.sequence_slot * kv_stride + kv_head * D;  // key of position 0
  const T* v_sequence = v + tile.sequence_slot * kv_stride + kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the tile's last query become zeros
    const int valid_keys = last_position - block * BN + 1;
    load_rows_async<T, D, BN, Tile::threads>(
        k_s + stage * Tile::elements, k_sequence + block * BN * kv_stride, kv_stride, valid_keys);
    load_rows_async<T, D, BN, Tile::threads>(
        v_s + stage * Tile::elements, v_sequence + block * BN * kv_stride, kv_stride, valid_keys);
  };

  load_rows_async<T, D, Tile::rows, Tile::threads>(q_s, q + tile.first_slot * q_stride + h * D,
                                                   q_stride, tile.count);
  load_rows_async<T, D, Tile::rows, Tile::threads>(do_s, dout + tile.first_slot * q_stride + h * D,
                                                   q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();

  const int r0 = warp * 16;
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  const int warp_last_position =
      r0 < tile.count ? tile.start_position + min(r0 + 15, tile.count - 1) : -1;
  const float scale_log2 = shape.scale * log2_e;
  float lse_log2[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    const std::int64_t at = (tile.first_slot + row) * static_cast<std::int64_t>(shape.heads) + h;
    lse_log2[r] = row < tile.count ? __fmul_rn(lse[at], log2_e) : 0.0f;
    row_delta[r] = row < tile.count ? delta[at] : 0.0f;
  }
  const unsigned q_lane =
      shared_address(q_s + r0 * stride) + a_lane_offset<stride, element_bytes>(lane);
  const unsigned do_lane =
      shared_address(do_s + r0 * stride) + a_lane_offset<stride, element_bytes>(lane);
  const unsigned k_lane =
      shared_address(k_s) + b_lane_offset<stride, element_bytes>(lane);  // K as B of S
  const unsigned v_lane =
      shared_address(v_s) + b_lane_offset<stride, element_bytes>(lane);  // V as B of dP
  const unsigned k_trans_lane =
      shared_address(k_s) + a_lane_offset<stride, element_bytes>(lane);  // K as B of dQ

  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

  for (int block = 0; block <= last_block; ++block) {
    copy_async_wait_all();  // this thread's copies of the block have landed
    __syncthreads();        // everyone's have, and nobody still reads the other stage
    if (block < last_block) load_block(block + 1, (block + 1) & 1);
    copy_async_commit();
    if (block * BN > warp_last_position) continue;
    const unsigned stage_offset = static_cast<unsigned>((block & 1) * stage_bytes);

    float s[BN / 8][4], dp[BN / 8][4];
    paired_products<T, D, BN, row_bytes, element_bytes>(s, dp, q_lane, do_lane, k_lane, v_lane,
                                                        stage_offset);
    // ds in place of s; the causal mask by the row's own position, needed only where the block
    // reaches past the warp's first row.
    const bool diagonal = block * BN + BN - 1 > warp_first_position;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const bool masked = diagonal && block * BN + nt * 8 + 2 * t + (e & 1) > position[r];
        const float p = fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -lse_log2[r]));
        s[nt][e] = masked ? 0.0f : __fmul_rn(p, __fsub_rn(dp[nt][e], row_delta[r]));
      }
    }
    // dQ += dS·K: K's B-fragments (keys x dims) through ldmatrix.trans.
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      std::uint32_t dsa[4];
      accumulator_to_a<T>(dsa, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int pair = 0; pair < D / 16; ++pair) {
        std::uint32_t kb[4];
        ldmatrix_x4_trans(
            kb, k_trans_lane + stage_offset + kc * 16 * row_bytes + pair * 16 * element_bytes);
        mma_16816<T>(acc[2 * pair], dsa, kb[0], kb[1]);
        mma_16816<T>(acc[2 * pair + 1], dsa, kb[2], kb[3]);
      }
    }
  }
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  // Only this warp ever read its Q rows: stage dq there.
  store_warp_rows<T, D>(q_s + r0 * stride, acc, shape.scale,
                        dq + (tile.first_slot + r0) * q_stride + h * D, q_stride, tile.count - r0,
                        lane);
}

// dk, dv: one CTA per (key tile, kv head). Warp w owns tile keys 16w..16w+15 (lane: keys g, g + 8).
// Steps in a fixed order: the heads of the group in order, and per head the query blocks from the
// tile's own block to the end of the sequence; each step's Q, dO, lse·log2 e and delta stream
// through shared memory. Per step Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (K, V fragments re-read from shared),
// pᵀ and dsᵀ as in dq (query past the key's position: masked to exact zeros; query past the
// sequence: padding, masked too), dV += Pᵀ·dO, dK += dSᵀ·Q.
template <typename T, int D>
__global__ void __launch_bounds__(BackwardTile<T, D>::threads, 2)
    dkdv_mma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                    const float* delta, T* dk, T* dv, const AttentionBackwardTile* tiles,
                    AttentionShape shape) {
  using Tile = BackwardTile<T, D>;
  constexpr int BM = Tile::block, stride = Tile::stride,
                element_bytes = static_cast<int>(sizeof(T));
  constexpr int QP = D > 64 ? BM / 2 : BM;  // queries per part of a step
  constexpr int row_bytes = stride * element_bytes, stage_bytes = Tile::elements * element_bytes;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* q_s = reinterpret_cast<T*>(shared_raw);  // [stages][queries][stride]
  T* do_s = q_s + 2 * Tile::elements;
  T* k_s = do_s + 2 * Tile::elements;  // the K tile; afterwards each warp's dk rows
  T* v_s = k_s + Tile::elements;       // the V tile; afterwards each warp's dv rows
  float* lse_s = reinterpret_cast<float*>(v_s + Tile::elements);  // [stages][queries], times log2 e
  float* delta_s = lse_s + 2 * BM;                                // [stages][queries]

  const AttentionBackwardTile tile = tiles[blockIdx.x / shape.kv_heads];
  const int kv_head = static_cast<int>(blockIdx.x % shape.kv_heads),
            group = shape.heads / shape.kv_heads;
  const int warp = static_cast<int>(threadIdx.x) / warp_size,
            lane = static_cast<int>(threadIdx.x) % warp_size;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const BackwardKeySteps<BM> steps(tile, kv_head, group);
  auto load_step = [&](int step, int stage) {  // queries past the sequence become zeros
    const int h = steps.head(step), first_query = steps.first_query(step);
    const int valid_queries = tile.sequence_length - first_query;
    const std::int64_t first_row = tile.sequence_slot + first_query;
    load_rows_async<T, D, BM, Tile::threads>(
        q_s + stage * Tile::elements, q + first_row * q_stride + h * D, q_stride, valid_queries);
    load_rows_async<T, D, BM, Tile::threads>(do_s + stage * Tile::elements,
                                             dout + first_row * q_stride + h * D, q_stride,
                                             valid_queries);
    stage_lse_delta<BM>(lse_s + stage * BM, delta_s + stage * BM, lse, delta, first_row,
                        shape.heads, h, valid_queries);
  };

  load_rows_async<T, D, Tile::rows, Tile::threads>(
      k_s, k + tile.first_slot * kv_stride + kv_head * D, kv_stride, tile.count);
  load_rows_async<T, D, Tile::rows, Tile::threads>(
      v_s, v + tile.first_slot * kv_stride + kv_head * D, kv_stride, tile.count);
  load_step(0, 0);
  copy_async_commit();

  const int r0 = warp * 16;
  const int key_position[2] = {tile.start_position + r0 + g, tile.start_position + r0 + g + 8};
  const float scale_log2 = shape.scale * log2_e;
  const unsigned k_lane =
      shared_address(k_s + r0 * stride) + a_lane_offset<stride, element_bytes>(lane);
  const unsigned v_lane =
      shared_address(v_s + r0 * stride) + a_lane_offset<stride, element_bytes>(lane);
  const unsigned q_lane =
      shared_address(q_s) + b_lane_offset<stride, element_bytes>(lane);  // Q as B of Sᵀ
  const unsigned do_lane =
      shared_address(do_s) + b_lane_offset<stride, element_bytes>(lane);  // dO as B of dPᵀ
  const unsigned q_trans_lane =
      shared_address(q_s) + a_lane_offset<stride, element_bytes>(lane);  // Q as B of dK
  const unsigned do_trans_lane =
      shared_address(do_s) + a_lane_offset<stride, element_bytes>(lane);  // dO as B of dV

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[dt][e] = dv_acc[dt][e] = 0.0f;
  }

  for (int step = 0; step < steps.count; ++step) {
    copy_async_wait_all();  // this thread's copies of the step have landed
    __syncthreads();  // everyone's (and the lse, delta stores) have; nobody reads the other stage
    if (step + 1 < steps.count) load_step(step + 1, (step + 1) & 1);
    copy_async_commit();
    if (r0 >= tile.count) continue;  // padding keys only
    const int stage = step & 1, first_query = steps.first_query(step);
    const unsigned stage_offset = static_cast<unsigned>(stage * stage_bytes);
    const float* lse_step = lse_s + stage * BM;
    const float* delta_step = delta_s + stage * BM;
    // The step's queries in parts of QP (32 at head dim 128, to stay within the registers), in
    // order.
#pragma unroll 1
    for (int part = 0; part < BM / QP; ++part) {
      const unsigned part_offset = stage_offset + static_cast<unsigned>(part * QP * row_bytes);
      float s[QP / 8][4], dp[QP / 8][4];
      paired_products<T, D, QP, row_bytes, element_bytes>(s, dp, k_lane, v_lane, q_lane, do_lane,
                                                          part_offset);
      // pᵀ in place of s, dsᵀ in place of dp.
#pragma unroll
      for (int nt = 0; nt < QP / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int column = part * QP + nt * 8 + 2 * t + (e & 1), query = first_query + column;
          const bool masked = query < key_position[e >> 1] || query >= tile.sequence_length;
          const float p = fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -lse_step[column]));
          const float ds = __fmul_rn(p, __fsub_rn(dp[nt][e], delta_step[column]));
          s[nt][e] = masked ? 0.0f : p;
          dp[nt][e] = masked ? 0.0f : ds;
        }
      }
      // dV += Pᵀ·dO, dK += dSᵀ·Q: dO's and Q's B-fragments (queries x dims) through ldmatrix.trans.
#pragma unroll
      for (int kc = 0; kc < QP / 16; ++kc) {
        std::uint32_t pa[4], dsa[4];
        accumulator_to_a<T>(pa, s[2 * kc], s[2 * kc + 1]);
        accumulator_to_a<T>(dsa, dp[2 * kc], dp[2 * kc + 1]);
#pragma unroll
        for (int pair = 0; pair < D / 16; ++pair) {
          const unsigned at = part_offset + kc * 16 * row_bytes + pair * 16 * element_bytes;
          std::uint32_t ob[4], qb[4];
          ldmatrix_x4_trans(ob, do_trans_lane + at);
          mma_16816<T>(dv_acc[2 * pair], pa, ob[0], ob[1]);
          mma_16816<T>(dv_acc[2 * pair + 1], pa, ob[2], ob[3]);
          ldmatrix_x4_trans(qb, q_trans_lane + at);
          mma_16816<T>(dk_acc[2 * pair], dsa, qb[0], qb[1]);
          mma_16816<T>(dk_acc[2 * pair + 1], dsa, qb[2], qb[3]);
        }
      }
    }
  }
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  // Only this warp ever read its K and V rows: stage dk and dv there.
  const std::int64_t out_row = tile.first_slot * kv_stride + kv_head * D + r0 * kv_stride;
  store_warp_rows<T, D>(k_s + r0 * stride, dk_acc, shape.scale, dk + out_row, kv_stride,
                        tile.count - r0, lane);
  store_warp_rows<T, D>(v_s + r0 * stride, dv_acc, 1.0f, dv + out_row, kv_stride, tile.count - r0,
                        lane);
}

unsigned warp_grid(std::int64_t items) {
  return static_cast<unsigned>((items + simt_warps - 1) / simt_warps);
}

template <typename F>
void dispatch(DeviceDType dtype, F&& body) {
  switch (dtype) {
    case DeviceDType::bf16:
      body(__nv_bfloat16{});
      return;
    case DeviceDType::fp16:
      body(__half{});
      return;
    case DeviceDType::fp32:
      body(float{});
      return;
  }
}

template <typename T, int D>
void launch_mma(const void* q, const void* k_cache, const void* v_cache, void* o, float* lse,
                const AttentionTile* tiles, int tile_count, AttentionShape shape,
                CUstream_st* stream) {
  using Tile = ForwardTile<T, D>;
  static bool configured = false;
  if (!configured) {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(
        forward_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::shared_bytes));
    configured = true;
  }
  const std::int64_t ctas = static_cast<std::int64_t>(tile_count) * shape.heads;
  if (ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention_forward_mma: tiles * heads exceeds the grid");
  forward_mma_kernel<T, D>
      <<<static_cast<unsigned>(ctas), Tile::threads, Tile::shared_bytes, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
          static_cast<T*>(o), lse, tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
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

namespace {

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

template <typename T, int D>
void launch_wgmma(const void* q, const void* k_cache, const void* v_cache, void* o, float* lse,
                  const AttentionTile* tiles, int tile_count, int longest_tile,
                  std::int64_t cache_rows, AttentionShape shape, CUstream_st* stream) {
  const WgmmaForwardPlan plan = plan_wgmma_forward(tile_count, longest_tile, shape);
  record_path(plan.pack_heads    ? "forward.wgmma.synchronous.decode.packed-heads"
              : plan.decode_like ? "forward.wgmma.synchronous.decode"
                                 : "forward.wgmma.synchronous.prefill");
  if (plan.pack_heads) {
    launch_wgmma_stages<T, D, 4, true>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape,
                                       stream);
  } else if (plan.decode_like) {
    launch_wgmma_stages<T, D, 4, false>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape,
                                        stream);
  } else {
    launch_wgmma_producer<T, D>(q, k_cache, v_cache, o, lse, tiles, tile_count, cache_rows, shape,
                                stream);
  }
}

template <typename T, int D>
void launch_backward_mma(const T* q, const T* k, const T* v, const float* lse, const T* dout,
                         const float* delta, T* dq, T* dk, T* dv,
                         const AttentionBackwardTile* query_tiles,
                         const AttentionBackwardTile* key_tiles, int tile_count,
                         AttentionShape shape, CUstream_st* stream) {
  using Tile = BackwardTile<T, D>;
  static bool configured = false;
  launch_backward_kernels<T>(dq_mma_kernel<T, D>, Tile::dq_shared_bytes, dkdv_mma_kernel<T, D>,
                             Tile::dkdv_shared_bytes, Tile::threads, configured, q, k, v, lse, dout,
                             delta, dq, dk, dv, query_tiles, key_tiles, tile_count, shape, stream);
}

}  // namespace

namespace {

// Whether the current device is sm_90 (the wgmma kernels' cubin), per device and cached.
bool device_is_sm90() {
  static bool cached[16] = {};
  static bool known[16] = {};
  static std::mutex mutex;
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
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

}  // namespace

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

void attention_write_cache(DeviceDType dtype, const void* k, const void* v, void* k_cache,
                           void* v_cache, const int* cache_rows, int slots, int row_width,
                           CUstream_st* stream) {
  if (slots <= 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    write_cache_kernel<T><<<slots, 128, 0, stream>>>(
        static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache),
        static_cast<T*>(v_cache), cache_rows, row_width);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
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
    if (dtype == DeviceDType::bf16) {
      shape.dim == 64
          ? launch_wgmma<__nv_bfloat16, 64>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                            longest_tile, cache_rows, shape, stream)
          : launch_wgmma<__nv_bfloat16, 128>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                             longest_tile, cache_rows, shape, stream);
    } else {
      shape.dim == 64 ? launch_wgmma<__half, 64>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                                 longest_tile, cache_rows, shape, stream)
                      : launch_wgmma<__half, 128>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                                  longest_tile, cache_rows, shape, stream);
    }
    return;
  }
  record_path("forward.mma-sync");
  if (dtype == DeviceDType::bf16) {
    shape.dim == 64 ? launch_mma<__nv_bfloat16, 64>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                                    shape, stream)
                    : launch_mma<__nv_bfloat16, 128>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                                     shape, stream);
  } else {
    shape.dim == 64
        ? launch_mma<__half, 64>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape, stream)
        : launch_mma<__half, 128>(q, k_cache, v_cache, o, lse, tiles, tile_count, shape, stream);
  }
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
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  record_path(splits > 1 ? "forward.simt.split-kv" : "forward.simt");
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_simt_kernel<T><<<warp_grid(items * splits), simt_warps * warp_size, 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
        static_cast<T*>(o), lse, tokens, token_count, shape, kv_block, splits, scratch);
    BITCHECK_CUDA_LAUNCH_CHECK();
    if (splits > 1) {
      combine_kernel<T><<<warp_grid(items), simt_warps * warp_size, 0, stream>>>(
          scratch, static_cast<T*>(o), lse, tokens, token_count, shape, splits);
      BITCHECK_CUDA_LAUNCH_CHECK();
    }
  });
}

void attention_backward(DeviceDType dtype, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* dout, float* delta, void* dq,
                        void* dk, void* dv, const AttentionToken* tokens, int token_count,
                        int max_position, AttentionShape shape, float* dq_atomic_scratch,
                        CUstream_st* stream) {
  if (token_count <= 0) return;
  if (shape.dim > simt_max_dim) throw std::invalid_argument("attention_backward: dim <= 128");
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  const int blocks_per_query = dq_atomic_scratch ? max_position / attention_mma_kv_block + 1 : 1;
  record_path(dq_atomic_scratch ? "backward.simt.atomic-dq" : "backward.simt");
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *q_t = static_cast<const T*>(q), *k_t = static_cast<const T*>(k),
            *v_t = static_cast<const T*>(v);
    const T* do_t = static_cast<const T*>(dout);
    delta_kernel<T><<<warp_grid(items), simt_warps * warp_size, 0, stream>>>(
        static_cast<const T*>(o), do_t, delta, tokens, token_count, shape);
    BITCHECK_CUDA_LAUNCH_CHECK();
    dq_kernel<T><<<warp_grid(items * blocks_per_query), simt_warps * warp_size, 0, stream>>>(
        q_t, k_t, v_t, do_t, lse, delta, static_cast<T*>(dq), tokens, token_count, shape,
        blocks_per_query, dq_atomic_scratch);
    BITCHECK_CUDA_LAUNCH_CHECK();
    if (dq_atomic_scratch) {
      const std::int64_t elements = items * shape.dim;
      round_dq_kernel<T><<<static_cast<unsigned>((elements + 255) / 256), 256, 0, stream>>>(
          dq_atomic_scratch, static_cast<T*>(dq), tokens, token_count, shape);
      BITCHECK_CUDA_LAUNCH_CHECK();
    }
    dkdv_kernel<T><<<warp_grid(static_cast<std::int64_t>(token_count) * shape.kv_heads),
                     simt_warps * warp_size, 0, stream>>>(q_t, k_t, v_t, do_t, lse, delta,
                                                          static_cast<T*>(dk), static_cast<T*>(dv),
                                                          tokens, token_count, shape);
    BITCHECK_CUDA_LAUNCH_CHECK();
  });
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
  auto run = [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value;
    const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
    delta_kernel<T><<<warp_grid(items), simt_warps * warp_size, 0, stream>>>(
        static_cast<const T*>(o), static_cast<const T*>(dout), delta, tokens, token_count, shape);
    BITCHECK_CUDA_LAUNCH_CHECK();
    if (wgmma) {
      attention_backward_wgmma(dtype, q, k, v, lse, dout, delta, dq, dk, dv, tiles, shape, stream);
      return;
    }
    launch_backward_mma<T, D>(static_cast<const T*>(q), static_cast<const T*>(k),
                              static_cast<const T*>(v), lse, static_cast<const T*>(dout), delta,
                              static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv),
                              tiles.queries, tiles.keys, tiles.count, shape, stream);
  };
  using Dim64 = std::integral_constant<int, 64>;
  using Dim128 = std::integral_constant<int, 128>;
  if (dtype == DeviceDType::bf16) {
    shape.dim == 64 ? run(__nv_bfloat16{}, Dim64{}) : run(__nv_bfloat16{}, Dim128{});
  } else {
    shape.dim == 64 ? run(__half{}, Dim64{}) : run(__half{}, Dim128{});
  }
}

namespace {

__device__ __forceinline__ std::uint64_t division_test_hash(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Pair i: l = 2^e (1 + m / 2^23), e in [-1, 23]; acc = +-2^e' (1 + m' / 2^23), e' in [-90, 99], or
// +-0 for one pair in 64.
__global__ void division_test_kernel(std::int64_t pairs, std::uint64_t seed, bool naive,
                                     unsigned long long* mismatches) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long count = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    const std::uint64_t h = division_test_hash(seed ^ division_test_hash(i));
    const auto l_bits = static_cast<std::uint32_t>(((126 + h % 25) << 23) | ((h >> 8) & 0x7fffff));
    const std::uint64_t h2 = division_test_hash(h);
    std::uint32_t acc_bits = static_cast<std::uint32_t>(
        ((127 - 90 + h2 % 190) << 23) | ((h2 >> 8) & 0x7fffff) | ((h2 >> 40) & 1u) << 31);
    if (((h2 >> 48) & 63) == 0) acc_bits &= 0x80000000u;  // +-0
    const float l = __uint_as_float(l_bits), acc = __uint_as_float(acc_bits);
    const float ours = naive ? __fmul_rn(acc, __frcp_rn(l))
                             : attention_device::division_quotient(
                                   acc, l, attention_device::division_reciprocal(l));
    count += __float_as_uint(ours) != __float_as_uint(__fdiv_rn(acc, l));
  }
  if (count) atomicAdd(mismatches, count);
}

}  // namespace

std::int64_t attention_division_mismatches(std::int64_t pairs, std::uint64_t seed, bool naive) {
  DeviceBuffer counter(sizeof(unsigned long long));
  counter.fill_bytes(0);
  division_test_kernel<<<1024, 256>>>(pairs, seed, naive, counter.as<unsigned long long>());
  BITCHECK_CUDA_LAUNCH_CHECK();
  unsigned long long mismatches = 0;
  counter.download(&mismatches, sizeof(mismatches));
  return static_cast<std::int64_t>(mismatches);
}

}  // namespace bitcheck::cuda
