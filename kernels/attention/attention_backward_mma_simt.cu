// The portable attention backward kernels over whole sequences: delta, the mma.sync tensor-core
// dq and dk/dv (bf16/fp16, head dim 64 or 128, any GPU from sm_80) and the SIMT ones (any dtype,
// head dim up to 128) with the atomicAdd-dq control. attention_plan.cu picks the kernels
// (attention_backward_mma, attention_backward) and records the paths.
//
// Kernels:
//   delta_kernel<T>                      delta = rowsum(do * o), a warp per (query, head), before
//                                        every backward: backward.mma, backward.wgmma[.paired],
//                                        backward.simt[.atomic-dq]
//   dq_mma_kernel<T, D>, dkdv_mma_kernel<T, D>   a CTA per 64-row tile: backward.mma
//   dq_kernel<T>, dkdv_kernel<T>         a warp per query (dq) and per key (dk, dv): backward.simt
//   dq_kernel<T> with atomic_scratch, round_dq_kernel<T>   dq from per-64-key-block partials added
//                                        with atomicAdd, then rounded: backward.simt.atomic-dq
//
// Why a row's bits do not depend on the batch: every sum runs in an order set by the row's own
// sequence and position (dq of a query over its keys in 64-key blocks from position 0; dk and dv of
// a key over the heads of its group and, per head, the query blocks from its own block to the end
// of the sequence; tiles of 64 rows starting at multiples of 64, or the SIMT kernels' warp per
// query or key), in fp32 with explicitly rounded softmax and ds arithmetic. The mma gives each
// element from its own row and column, the causal mask is per element (masked p and ds are exact
// zeros), and only the named control (dq_atomic_scratch) uses atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_backward_device.cuh"
#include "attention_device.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

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

// dq: one CTA per (query tile, head), heads of a tile adjacent. Warp w owns tile rows 16w..16w+15
// (lane: rows g, g + 8). Key blocks 0..tile's block stream through shared memory in order; per
// block S = Q·Kᵀ and dP = dO·Vᵀ (Q, dO fragments re-read from shared), p = 2^(s·scale·log2 e −
// lse·log2 e), ds = p·(dp − delta), dQ += dS·K. Tiles are aligned to the blocks, so only the tile's
// own (last) block needs the causal mask, and only a warp of padding rows skips blocks.
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

  const HeadTileCta<AttentionBackwardTile, D, BN> cta(tiles, shape);
  const AttentionBackwardTile& tile = cta.tile;
  const CtaThread<D>& thread = cta.thread;
  const T* k_sequence =
      k + tile.sequence_slot * thread.kv_stride + cta.kv_head * D;  // key of position 0
  const T* v_sequence = v + tile.sequence_slot * thread.kv_stride + cta.kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the tile's last query become zeros
    load_kv_block<false, T, D, BN, Tile::threads>(k_s, v_s, Tile::elements, stage, k_sequence,
                                                  v_sequence, thread.kv_stride, block,
                                                  cta.last_position);
  };

  load_rows_async<T, D, Tile::rows, Tile::threads>(
      q_s, q + tile.first_slot * thread.q_stride + cta.h * D, thread.q_stride, tile.count);
  load_rows_async<T, D, Tile::rows, Tile::threads>(
      do_s, dout + tile.first_slot * thread.q_stride + cta.h * D, thread.q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();

  const int r0 = thread.warp * 16;
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + thread.g, warp_first_position + thread.g + 8};
  const int warp_last_position =
      r0 < tile.count ? tile.start_position + min(r0 + 15, tile.count - 1) : -1;
  const float scale_log2 = shape.scale * log2_e;
  float lse_log2[2], row_delta[2];
  load_row_lse_delta(lse_log2, row_delta, lse, delta, tile, shape.heads, cta.h, r0, thread.g);
  const unsigned q_lane =
      shared_address(q_s + r0 * stride) + a_lane_offset<stride, element_bytes>(thread.lane);
  const unsigned do_lane =
      shared_address(do_s + r0 * stride) + a_lane_offset<stride, element_bytes>(thread.lane);
  const unsigned k_lane =
      shared_address(k_s) + b_lane_offset<stride, element_bytes>(thread.lane);  // K as B of S
  const unsigned v_lane =
      shared_address(v_s) + b_lane_offset<stride, element_bytes>(thread.lane);  // V as B of dP
  const unsigned k_trans_lane =
      shared_address(k_s) + a_lane_offset<stride, element_bytes>(thread.lane);  // K as B of dQ

  float acc[D / 8][4];
  clear_accumulators(acc);

  for (int block = 0; block <= cta.last_block; ++block) {
    two_stage_block(block, cta.last_block, load_block);
    if (block * BN > warp_last_position) continue;
    const unsigned stage_offset = static_cast<unsigned>((block & 1) * stage_bytes);

    float s[BN / 8][4], dp[BN / 8][4];
    paired_products<T, D, BN, row_bytes, element_bytes>(s, dp, q_lane, do_lane, k_lane, v_lane,
                                                        stage_offset);
    key_block_ds<BN>(s, dp, block, warp_first_position, position, thread.t, scale_log2, lse_log2,
                     row_delta);
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
                        dq + (tile.first_slot + r0) * thread.q_stride + cta.h * D, thread.q_stride,
                        tile.count - r0, thread.lane);
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

  const KeyTileCta<D, BM> cta(tiles, shape);
  const AttentionBackwardTile& tile = cta.tile;
  const CtaThread<D>& thread = cta.thread;
  auto load_step = [&](int step, int stage) {
    cta.template load_step<false, T, Tile::threads>(q_s, do_s, Tile::elements, lse_s, delta_s, step,
                                                    stage, q, dout, lse, delta, shape.heads);
  };

  cta.template load_keys<false, T, Tile::rows, Tile::threads>(k_s, v_s, k, v);
  load_step(0, 0);
  copy_async_commit();

  const int r0 = thread.warp * 16;
  const int key_position[2] = {tile.start_position + r0 + thread.g,
                               tile.start_position + r0 + thread.g + 8};
  const float scale_log2 = shape.scale * log2_e;
  const unsigned k_lane =
      shared_address(k_s + r0 * stride) + a_lane_offset<stride, element_bytes>(thread.lane);
  const unsigned v_lane =
      shared_address(v_s + r0 * stride) + a_lane_offset<stride, element_bytes>(thread.lane);
  const unsigned q_lane =
      shared_address(q_s) + b_lane_offset<stride, element_bytes>(thread.lane);  // Q as B of Sᵀ
  const unsigned do_lane =
      shared_address(do_s) + b_lane_offset<stride, element_bytes>(thread.lane);  // dO as B of dPᵀ
  const unsigned q_trans_lane =
      shared_address(q_s) + a_lane_offset<stride, element_bytes>(thread.lane);  // Q as B of dK
  const unsigned do_trans_lane =
      shared_address(do_s) + a_lane_offset<stride, element_bytes>(thread.lane);  // dO as B of dV

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
  clear_accumulators(dk_acc, dv_acc);

  for (int step = 0; step < cta.steps.count; ++step) {
    two_stage_step(step, cta.steps.count, load_step);  // its barrier: the lse, delta stores too
    if (r0 >= tile.count) continue;                    // padding keys only
    const int stage = step & 1, first_query = cta.steps.first_query(step);
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
          const int column = part * QP + nt * 8 + 2 * thread.t + (e & 1),
                    query = first_query + column;
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
  const std::int64_t out_row =
      tile.first_slot * thread.kv_stride + cta.kv_head * D + r0 * thread.kv_stride;
  store_warp_rows<T, D>(k_s + r0 * stride, dk_acc, shape.scale, dk + out_row, thread.kv_stride,
                        tile.count - r0, thread.lane);
  store_warp_rows<T, D>(v_s + r0 * stride, dv_acc, 1.0f, dv + out_row, thread.kv_stride,
                        tile.count - r0, thread.lane);
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

void launch_backward_delta(DeviceDType dtype, const void* o, const void* dout, float* delta,
                           const AttentionToken* tokens, int token_count, AttentionShape shape,
                           CUstream_st* stream) {
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    delta_kernel<T><<<warp_grid(items), simt_warps * warp_size, 0, stream>>>(
        static_cast<const T*>(o), static_cast<const T*>(dout), delta, tokens, token_count, shape);
    BITCHECK_CUDA_LAUNCH_CHECK();
  });
}

void launch_backward_simt(DeviceDType dtype, const void* q, const void* k, const void* v,
                          const float* lse, const void* dout, const float* delta, void* dq,
                          void* dk, void* dv, const AttentionToken* tokens, int token_count,
                          AttentionShape shape, int blocks_per_query, float* dq_atomic_scratch,
                          CUstream_st* stream) {
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *q_t = static_cast<const T*>(q), *k_t = static_cast<const T*>(k),
            *v_t = static_cast<const T*>(v);
    const T* do_t = static_cast<const T*>(dout);
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

void launch_backward_mma_sync(DeviceDType dtype, const void* q, const void* k, const void* v,
                              const float* lse, const void* dout, const float* delta, void* dq,
                              void* dk, void* dv, const AttentionBackwardTiles& tiles,
                              AttentionShape shape, CUstream_st* stream) {
  dispatch_tensor_core(dtype, shape.dim, [&](auto tag, auto dim) {
    using T = decltype(tag);
    launch_backward_mma<T, decltype(dim)::value>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), lse,
        static_cast<const T*>(dout), delta, static_cast<T*>(dq), static_cast<T*>(dk),
        static_cast<T*>(dv), tiles.queries, tiles.keys, tiles.count, shape, stream);
  });
}

}  // namespace bitcheck::cuda
