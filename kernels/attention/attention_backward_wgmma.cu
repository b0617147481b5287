// The attention backward on wgmma (sm_90a; bf16/fp16, head dim 64 or 128): the same two kernels
// and the same sums as the mma.sync backward of attention_backward_mma_simt.cu (dq per 64-query
// tile over key blocks in order; dk, dv per 64-key tile over the heads of the group in order and,
// per head, over query blocks from the key's own block to the end of the sequence), with each
// block's products issued as warpgroup MMAs. attention_backward_mma (attention_plan.cu) runs
// delta_kernel first and records the path.
//
// Kernels:
//   dq_wgmma_kernel<T, 64>, dkdv_wgmma_kernel<T, 64>  a warpgroup per 64-row tile: backward.wgmma
//   dq_pair_kernel<T, 128>, dkdv_pair_kernel<T, 128>  two warpgroups on a 128-row pair of tiles:
//                                                     backward.wgmma.paired
//
// Why a row's bits do not depend on the batch: a warpgroup holds one 64-row tile of one sequence
// starting at a multiple of 64 (AttentionBackwardTile), so the blocks a row visits and their order
// follow from its own position and sequence length, each product element comes from its own row and
// column (wgmma k-steps in order), the causal mask is per element and the p and ds arithmetic is
// explicitly rounded as in the mma.sync kernels. No atomics: every output element is written once,
// by the CTA that owns its row.
//
// Scheduling: at head dim 64, three CTAs of one warpgroup per SM, each a synchronous pipeline
// (cp.async loads of the next block in flight under the current block's products), so one CTA's
// exponentials overlap the other's MMAs. At head dim 128, the paired kernels (below): one CTA of
// two warpgroups per SM, each warpgroup one 64-row tile of a 128-row pair, the streamed blocks
// shared between them. Operands sit in 128-byte swizzled panels of 64 elements
// (load_swizzled_async): row r's 16-byte chunk c at r * 128 + ((c ^ (r % 8)) * 16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "attention_backward_device.cuh"
#include "attention_device.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/async_copy.cuh"
#include "common/cuda_check.cuh"
#include "common/wgmma.cuh"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

template <typename T, int D>
struct WgmmaBackwardTile {
  static constexpr int rows = attention_mma_backward_tile;  // queries (dq) or keys (dk, dv)
  static constexpr int block = attention_mma_kv_block;      // keys (dq) or queries (dk, dv)
  static constexpr int threads = 128;                       // one warpgroup
  static constexpr int panels = D / 64;
  static constexpr int panel_bytes = rows * 128;  // 64 rows of one 64-element panel
  static constexpr int tile_bytes = panels * panel_bytes;
  // dq: Q, dO and two stages of K and V. dk/dv: K, V, two stages of Q and dO, and of lse, delta.
  static constexpr int dq_shared_bytes = 6 * tile_bytes + 1024;  // + alignment slack
  static constexpr int dkdv_shared_bytes = 6 * tile_bytes + 2 * 2 * block * 4 + 1024;
  // The output staging (4 warps x 16 rows of D + 8 elements) reuses two tiles' room.
  static constexpr int staging_stride = D + 8;
  static_assert(rows == 64 && block == 64 && D % 64 == 0, "64-row tiles and blocks");
  static_assert(4 * 16 * staging_stride * static_cast<int>(sizeof(T)) <= 2 * tile_bytes,
                "staging fits");
  static_assert(threads == 2 * block, "a thread per lse or delta of a block");
  static_assert(dq_shared_bytes <= 227 * 1024 && dkdv_shared_bytes <= 227 * 1024,
                "shared memory per CTA");
};

template <typename T, int D>
__device__ __forceinline__ void rs_m64nd(float (&acc)[D / 8][4], const std::uint32_t (&a)[4],
                                         std::uint64_t b) {
#ifdef BITCHECK_ATTENTION_SM90A
  if constexpr (D == 128) {
    wgmma::rs_m64n128k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), a, b);
  } else {
    wgmma::rs_m64n64k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), a, b);
  }
#endif
}

// s = A·Bᵀ and dp = A2·B2ᵀ of a 64 x 64 block over the head dim, D/16 k-steps in order each; A
// operands are 64-row tiles, B operands 64-row blocks, both K-major in swizzled panels, given as
// the descriptors of their first k-step (operand_descriptor). Each k-step's descriptor is that
// one advanced in 32-bit arithmetic (a uniform add per wgmma instead of building each).
template <typename T, int D>
__device__ __forceinline__ void paired_scores(float (&s)[8][4], float (&dp)[8][4], std::uint64_t a1,
                                              std::uint64_t b1, std::uint64_t a2,
                                              std::uint64_t b2) {
#ifdef BITCHECK_ATTENTION_SM90A
  constexpr int panel = WgmmaBackwardTile<T, D>::panel_bytes;
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint32_t at = ((kk / 4) * panel + (kk % 4) * 32) >> 4;
    wgmma::ss_m64n64k16<T>(reinterpret_cast<float(&)[32]>(s), wgmma::advance(a1, at),
                           wgmma::advance(b1, at), kk > 0);
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint32_t at = ((kk / 4) * panel + (kk % 4) * 32) >> 4;
    wgmma::ss_m64n64k16<T>(reinterpret_cast<float(&)[32]>(dp), wgmma::advance(a2, at),
                           wgmma::advance(b2, at), kk > 0);
  }
  wgmma::commit();
  wgmma::wait_all();
#endif
}

#ifdef BITCHECK_ATTENTION_SM90A
// The descriptor of a K-major operand of paired_scores at a shared-memory address.
__device__ __forceinline__ std::uint64_t operand_descriptor(std::uint32_t address) {
  return wgmma::descriptor(address, 16, 1024);
}
#endif

// acc += A·B over one 64-row block in four 16-row k-steps in order: A from registers (a[kc]), B
// the block's N-major panels at `address` (16 rows x D per k-step).
template <typename T, int D>
__device__ __forceinline__ void issue_block_products(float (&acc)[D / 8][4],
                                                     const std::uint32_t (&a)[4][4],
                                                     std::uint32_t address) {
  const std::uint64_t base = wgmma::descriptor(address, WgmmaBackwardTile<T, D>::panel_bytes, 1024);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) rs_m64nd<T, D>(acc, a[kc], wgmma::advance(base, kc * 128));
}

#ifdef BITCHECK_ATTENTION_SM90A
// One key block of dq for a warpgroup of the paired kernels (dq_wgmma_kernel writes the same steps
// out): S = Q·Kᵀ and dP = dO·Vᵀ, then p = 2^(s·scale·log2 e − lse·log2 e), ds = p·(dp − delta),
// masked to 0 by the row's own position where the block reaches past the warp's first row, and
// dQ += dS·K with dS from registers and K (16 keys x D, N-major) per k-step, keys in order; waited
// for.
template <typename T, int D>
__device__ __forceinline__ void dq_block(float (&acc)[D / 8][4], std::uint64_t q_descriptor,
                                         std::uint64_t do_descriptor, std::uint32_t k_address,
                                         std::uint32_t v_address, int block,
                                         int warp_first_position, const int (&position)[2], int t,
                                         float scale_log2, const float (&lse_log2)[2],
                                         const float (&row_delta)[2]) {
  constexpr int BN = attention_mma_kv_block;
  float s[BN / 8][4], dp[BN / 8][4];
  paired_scores<T, D>(s, dp, q_descriptor, operand_descriptor(k_address), do_descriptor,
                      operand_descriptor(v_address));
  // ds in place of s; away from the diagonal the same arithmetic runs without the per-element test.
  auto scores = [&](auto masking) {
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float p = fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -lse_log2[r]));
        const float ds = __fmul_rn(p, __fsub_rn(dp[nt][e], row_delta[r]));
        if constexpr (decltype(masking)::value) {
          s[nt][e] = block * BN + nt * 8 + 2 * t + (e & 1) > position[r] ? 0.0f : ds;
        } else {
          s[nt][e] = ds;
        }
      }
    }
  };
  if (block * BN + BN - 1 > warp_first_position) {
    scores(std::true_type{});
  } else {
    scores(std::false_type{});
  }
  std::uint32_t dsa[BN / 16][4];
  pack_p_fragments<T, BN>(s, dsa);
  wgmma::fence();
  issue_block_products<T, D>(acc, dsa, k_address);
  wgmma::commit();
  wgmma::wait_all();
}

// One query block of dk and dv for a warpgroup of the paired kernels (dkdv_wgmma_kernel writes the
// same steps out): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, pᵀ and dsᵀ as in dq_block with the lse and delta of
// the block's queries from shared memory (lse times log2 e already, or with RawLse as the forward
// wrote it), a query before the key or at or past
// sequence_length masked to 0 (tested only in the key tile's own block, from tile_start, and the
// sequence's last), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ, dSᵀ from registers and dO, Q (16
// queries x D, N-major) per k-step, queries in order; waited for.
template <typename T, int D, bool RawLse>
__device__ __forceinline__ void dkdv_block(float (&dk_acc)[D / 8][4], float (&dv_acc)[D / 8][4],
                                           std::uint32_t k_address, std::uint32_t v_address,
                                           std::uint32_t q_address, std::uint32_t do_address,
                                           const float* lse_step, const float* delta_step,
                                           int first_query, int tile_start,
                                           const int (&key_position)[2], int sequence_length, int t,
                                           float scale_log2) {
  constexpr int BM = attention_mma_kv_block;
  float s[BM / 8][4], dp[BM / 8][4];
  paired_scores<T, D>(s, dp, operand_descriptor(k_address), operand_descriptor(q_address),
                      operand_descriptor(v_address), operand_descriptor(do_address));
  auto scores = [&](auto masking) {
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt) {
      const int column = nt * 8 + 2 * t;
      const float2 lse_pair = *reinterpret_cast<const float2*>(lse_step + column);
      const float2 delta_pair = *reinterpret_cast<const float2*>(delta_step + column);
      const float lse_log2[2] = {RawLse ? __fmul_rn(lse_pair.x, log2_e) : lse_pair.x,
                                 RawLse ? __fmul_rn(lse_pair.y, log2_e) : lse_pair.y};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -lse_log2[e & 1]));
        const float ds = __fmul_rn(p, __fsub_rn(dp[nt][e], (e & 1) ? delta_pair.y : delta_pair.x));
        if constexpr (decltype(masking)::value) {
          const int query = first_query + column + (e & 1);
          const bool masked = query < key_position[e >> 1] || query >= sequence_length;
          s[nt][e] = masked ? 0.0f : p;
          dp[nt][e] = masked ? 0.0f : ds;
        } else {
          s[nt][e] = p;
          dp[nt][e] = ds;
        }
      }
    }
  };
  if (first_query < tile_start + BM || first_query + BM > sequence_length) {
    scores(std::true_type{});
  } else {
    scores(std::false_type{});
  }
  std::uint32_t pa[BM / 16][4], dsa[BM / 16][4];
  pack_p_fragments<T, BM>(s, pa);
  pack_p_fragments<T, BM>(dp, dsa);
  wgmma::fence();
  issue_block_products<T, D>(dv_acc, pa, do_address);
  issue_block_products<T, D>(dk_acc, dsa, q_address);
  wgmma::commit();
  wgmma::wait_all();
}
#endif

// The head-dim-64 kernels below write dq_block's and dkdv_block's steps out in their loops instead
// of calling them: with the calls ptxas spilled 84 bytes in the dk/dv kernel at its 168 registers,
// and head dim 64's forward + backward ran 4-5 % slower at L = 2048 (H100, same call).

// dq at head dim 64: one CTA (a warpgroup) per (query tile, head). Key blocks 0..the tile's own
// block stream through two shared stages in order; per block S = Q·Kᵀ and dP = dO·Vᵀ, then p =
// 2^(s·scale·log2 e − lse·log2 e), ds = p·(dp − delta) (masked: 0) and dQ += dS·K with dS from
// registers and K N-major. Only the tile's own block needs the causal mask.
template <typename T, int D>
__global__ void __launch_bounds__(128, 2)
    dq_wgmma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                    const float* delta, T* dq, const AttentionBackwardTile* tiles,
                    AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaBackwardTile<T, D>;
  constexpr int BN = Tile::block, threads = Tile::threads;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* q_s = shared;
  unsigned char* do_s = q_s + Tile::tile_bytes;
  unsigned char* k_s = do_s + Tile::tile_bytes;  // [stages][panels][keys][128 bytes]
  unsigned char* v_s = k_s + 2 * Tile::tile_bytes;

  const HeadTileCta<AttentionBackwardTile, D, BN> cta(tiles, shape);
  const AttentionBackwardTile& tile = cta.tile;
  const CtaThread<D>& thread = cta.thread;
  const T* k_sequence =
      k + tile.sequence_slot * thread.kv_stride + cta.kv_head * D;  // key of position 0
  const T* v_sequence = v + tile.sequence_slot * thread.kv_stride + cta.kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the tile's last query become zeros
    load_kv_block<true, T, D, BN, threads>(k_s, v_s, Tile::tile_bytes, stage, k_sequence,
                                           v_sequence, thread.kv_stride, block, cta.last_position);
  };
  load_swizzled_async<T, D, Tile::rows, threads>(
      q_s, q + tile.first_slot * thread.q_stride + cta.h * D, thread.q_stride, tile.count);
  load_swizzled_async<T, D, Tile::rows, threads>(
      do_s, dout + tile.first_slot * thread.q_stride + cta.h * D, thread.q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();

  const int r0 = thread.warp * 16;
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + thread.g, warp_first_position + thread.g + 8};
  const float scale_log2 = shape.scale * log2_e;
  float lse_log2[2], row_delta[2];
  load_row_lse_delta(lse_log2, row_delta, lse, delta, tile, shape.heads, cta.h, r0, thread.g);
  const std::uint32_t q_address = shared_address(q_s), do_address = shared_address(do_s);

  float acc[D / 8][4];
  clear_accumulators(acc);

  for (int block = 0; block <= cta.last_block; ++block) {
    two_stage_block(block, cta.last_block, load_block);
    const int stage = block & 1;
    const std::uint32_t k_address = shared_address(k_s + stage * Tile::tile_bytes);
    const std::uint32_t v_address = shared_address(v_s + stage * Tile::tile_bytes);

    float s[BN / 8][4], dp[BN / 8][4];
    paired_scores<T, D>(s, dp, operand_descriptor(q_address), operand_descriptor(k_address),
                        operand_descriptor(do_address), operand_descriptor(v_address));
    key_block_ds<BN>(s, dp, block, warp_first_position, position, thread.t, scale_log2, lse_log2,
                     row_delta);
    std::uint32_t dsa[BN / 16][4];
    pack_p_fragments<T, BN>(s, dsa);
    // dQ += dS·K: K (16 keys x D, N-major) per k-step, keys in order.
    wgmma::fence();
    issue_block_products<T, D>(acc, dsa, k_address);
    wgmma::commit();
    wgmma::wait_all();
  }
  __syncthreads();  // every warp is done with the K/V stages: they become the output staging
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  T* staging = reinterpret_cast<T*>(k_s) + r0 * Tile::staging_stride;
  store_warp_rows<T, D>(staging, acc, shape.scale,
                        dq + (tile.first_slot + r0) * thread.q_stride + cta.h * D, thread.q_stride,
                        tile.count - r0, thread.lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// dk, dv at head dim 64: one CTA (a warpgroup) per (key tile, kv head). Steps in a fixed order: the
// heads of the group in order and, per head, the query blocks from the tile's own block to the end
// of the sequence; each step's Q, dO, lse·log2 e and delta stream through two shared stages. Per
// step Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, pᵀ and dsᵀ as in dq (a query before the key, or past the
// sequence: exact zeros), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ, dSᵀ from registers and dO, Q
// N-major.
template <typename T, int D>
__global__ void __launch_bounds__(128, 3)
    dkdv_wgmma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                      const float* delta, T* dk, T* dv, const AttentionBackwardTile* tiles,
                      AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaBackwardTile<T, D>;
  constexpr int BM = Tile::block, threads = Tile::threads;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* k_s = shared;
  unsigned char* v_s = k_s + Tile::tile_bytes;
  unsigned char* q_s = v_s + Tile::tile_bytes;  // [stages][panels][queries][128 bytes]
  unsigned char* do_s = q_s + 2 * Tile::tile_bytes;
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * Tile::tile_bytes);  // [stages][queries]
  float* delta_s = lse_s + 2 * BM;                                       // [stages][queries]

  const KeyTileCta<D, BM> cta(tiles, shape);
  const AttentionBackwardTile& tile = cta.tile;
  const CtaThread<D>& thread = cta.thread;
  auto load_step = [&](int step, int stage) {
    cta.template load_step<true, T, threads>(q_s, do_s, Tile::tile_bytes, lse_s, delta_s, step,
                                             stage, q, dout, lse, delta, shape.heads);
  };

  cta.template load_keys<true, T, Tile::rows, threads>(k_s, v_s, k, v);
  load_step(0, 0);
  copy_async_commit();

  const int r0 = thread.warp * 16;
  const int key_position[2] = {tile.start_position + r0 + thread.g,
                               tile.start_position + r0 + thread.g + 8};
  const float scale_log2 = shape.scale * log2_e;
  const std::uint32_t k_address = shared_address(k_s), v_address = shared_address(v_s);

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
  clear_accumulators(dk_acc, dv_acc);

  for (int step = 0; step < cta.steps.count; ++step) {
    two_stage_step(step, cta.steps.count, load_step);  // its barrier: the lse, delta stores too
    const int stage = step & 1, first_query = cta.steps.first_query(step);
    const std::uint32_t q_address = shared_address(q_s + stage * Tile::tile_bytes);
    const std::uint32_t do_address = shared_address(do_s + stage * Tile::tile_bytes);
    const float* lse_step = lse_s + stage * BM;
    const float* delta_step = delta_s + stage * BM;

    float s[BM / 8][4], dp[BM / 8][4];
    paired_scores<T, D>(s, dp, operand_descriptor(k_address), operand_descriptor(q_address),
                        operand_descriptor(v_address), operand_descriptor(do_address));
    // pᵀ in place of s, dsᵀ in place of dp. Only the tile's own block (queries before a key) and
    // the sequence's last (queries past its end) mask anything; elsewhere the same arithmetic
    // runs without the per-element test.
    auto scores = [&](auto masking) {
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
        const int column = nt * 8 + 2 * thread.t;
        const float2 lse_pair = *reinterpret_cast<const float2*>(lse_step + column);
        const float2 delta_pair = *reinterpret_cast<const float2*>(delta_step + column);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p =
              fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -((e & 1) ? lse_pair.y : lse_pair.x)));
          const float ds =
              __fmul_rn(p, __fsub_rn(dp[nt][e], (e & 1) ? delta_pair.y : delta_pair.x));
          if constexpr (decltype(masking)::value) {
            const int query = first_query + column + (e & 1);
            const bool masked = query < key_position[e >> 1] || query >= tile.sequence_length;
            s[nt][e] = masked ? 0.0f : p;
            dp[nt][e] = masked ? 0.0f : ds;
          } else {
            s[nt][e] = p;
            dp[nt][e] = ds;
          }
        }
      }
    };
    if (first_query < tile.start_position + Tile::rows || first_query + BM > tile.sequence_length) {
      scores(std::true_type{});
    } else {
      scores(std::false_type{});
    }
    std::uint32_t pa[BM / 16][4], dsa[BM / 16][4];
    pack_p_fragments<T, BM>(s, pa);
    pack_p_fragments<T, BM>(dp, dsa);
    // dV += Pᵀ·dO, dK += dSᵀ·Q: dO and Q (16 queries x D, N-major) per k-step, queries in order.
    wgmma::fence();
    issue_block_products<T, D>(dv_acc, pa, do_address);
    issue_block_products<T, D>(dk_acc, dsa, q_address);
    wgmma::commit();
    wgmma::wait_all();
  }
  __syncthreads();  // every warp is done with the stages: they become the output staging
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  const std::int64_t out_row =
      tile.first_slot * thread.kv_stride + cta.kv_head * D + r0 * thread.kv_stride;
  T* staging = reinterpret_cast<T*>(q_s) + r0 * Tile::staging_stride;
  store_warp_rows<T, D>(staging, dk_acc, shape.scale, dk + out_row, thread.kv_stride,
                        tile.count - r0, thread.lane);
  store_warp_rows<T, D>(staging, dv_acc, 1.0f, dv + out_row, thread.kv_stride, tile.count - r0,
                        thread.lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// The paired kernels (head dim 128): a CTA of two warpgroups over one 128-row pair of tiles
// (attention_backward_pair_tile), warpgroup w owning rows 64w..64w+63, the tile starting at
// position start_position + 64w: the same rows, blocks and sums as dq_wgmma_kernel and
// dkdv_wgmma_kernel on that tile, so every element keeps its bits. Each block of the streamed
// operand (K and V for dq, Q, dO, lse and delta for dk/dv) is loaded once for both warpgroups,
// which halves the loads per product. As it starts step n, every thread copies its share of step
// n + 1 with cp.async and arrives on that stage's full mbarrier when its copies land (256
// arrivals); each warp arrives on a stage's empty mbarrier once its products are done with it (8
// arrivals), and a stage is refilled only then. So a warpgroup starts step n + 1 once the other
// has started step n (with 4 stages the refill, of step n - 3's stage, never waits longer), and
// one warpgroup's exponentials run under the other's products. Loading two steps ahead instead
// ties them closer (the refill then waits for the other to finish step n - 2): 3-5 % slower on an
// H100. A step that holds no key (dq) or query (dk/dv) for a warpgroup's rows is skipped by it:
// the first warpgroup's dq ends one block before the second's, the second's dk/dv starts one
// block after the first's, per head.
template <typename T, int D>
struct WgmmaPairTile {
  static constexpr int block = attention_mma_kv_block;
  static constexpr int threads = 256;
  static constexpr int stages = 4;
  static constexpr int ahead = 1;
  static constexpr int tile_bytes = WgmmaBackwardTile<T, D>::tile_bytes;  // 64 rows
  static constexpr int barrier_bytes = 2 * stages * 8;
  // dq: each warpgroup's Q and dO, then the stages' K and V. dk/dv: each warpgroup's K and V, then
  // the stages' Q and dO, and their lse and delta (raw lse: times log2 e where used).
  static constexpr int dq_shared_bytes =
      4 * tile_bytes + stages * 2 * tile_bytes + barrier_bytes + 1024;  // + alignment slack
  static constexpr int dkdv_shared_bytes =
      4 * tile_bytes + stages * (2 * tile_bytes + 2 * block * 4) + barrier_bytes + 1024;
  static_assert(attention_backward_pair_tile == 2 * 64, "two 64-row tiles");
  static_assert(ahead == 1 && stages >= 4, "a refill waits for no more than the other's start");
  static_assert(dkdv_shared_bytes <= 227 * 1024 && dq_shared_bytes <= 227 * 1024, "one CTA per SM");
  static_assert(4 * 16 * (D + 8) * static_cast<int>(sizeof(T)) <= 2 * tile_bytes,
                "a warpgroup's staging fits its own two tiles");
};

// The part of a 128-row pair warpgroup w owns: its first position and rows (<= 0: none).
struct PairRows {
  int start, count;
  __device__ PairRows(const AttentionBackwardTile& tile, int w)
      : start(tile.start_position + 64 * w), count(min(64, tile.count - 64 * w)) {}
};

#ifdef BITCHECK_ATTENTION_SM90A
// The stages of a paired CTA: each stage's full mbarrier (every thread arrives once its copies of
// the step land) and empty mbarrier (every warp arrives once its products are done with it), right
// after the stages in shared memory. Step n uses stage n % Stages, for the (n / Stages)-th time.
template <int Stages>
struct PairPipeline {
  std::uint64_t* full;
  std::uint64_t* empty;
  __device__ explicit PairPipeline(unsigned char* barriers)
      : full(reinterpret_cast<std::uint64_t*>(barriers)), empty(full + Stages) {}
  // Thread 0 sets the barriers up; a __syncthreads must follow before any thread uses them.
  __device__ void init(int thread) const {
    if (thread != 0) return;
    for (int i = 0; i < Stages; ++i) {
      async_copy::mbar_init(&full[i], 256);
      async_copy::mbar_init(&empty[i], 256 / warp_size);
    }
    async_copy::mbar_init_fence();
  }
  // This thread's share of step `step`, copied by copy(stage) once both warpgroups are done with
  // the stage's last use; the thread arrives on the full barrier when the copies land.
  template <typename Copy>
  __device__ void fill(int step, Copy copy) const {
    const int stage = step % Stages;
    async_copy::mbar_wait(&empty[stage], ((step / Stages) & 1) ^ 1);
    copy(stage);
    copy_async_commit();
    copy_async_arrive(&full[stage]);
  }
  // Everyone's copies of step `step` have landed.
  __device__ void wait(int step) const {
    async_copy::mbar_wait(&full[step % Stages], (step / Stages) & 1);
  }
  // This warp is done with step `step`'s stage.
  __device__ void release(int step, int lane) const {
    __syncwarp();
    if (lane == 0) async_copy::mbar_arrive(&empty[step % Stages]);
  }
  // The first `Ahead` of `count` steps loaded (load(step)), an empty copy group standing in for
  // each missing one; then this thread's earlier copies (its warpgroup's own tiles) have landed,
  // and after named barrier 1 + w, those of its whole warpgroup w.
  template <int Ahead, typename Load>
  __device__ void start(int count, int w, Load load) const {
#pragma unroll
    for (int i = 0; i < Ahead; ++i) {
      if (i < count) {
        load(i);
      } else {
        copy_async_commit();
      }
    }
    copy_async_wait<Ahead>();
    async_copy::named_barrier_sync(1 + w, 128);
  }
};

// The CTA's dynamic shared memory at 1024-byte alignment, by pointer arithmetic on the shared
// array, so that the compiler knows every pointer derived from it points into shared memory (plain
// loads and stores become LDS and STS, not generic ones).
__device__ __forceinline__ unsigned char* pair_shared_memory(unsigned char* raw) {
  return raw + ((1024 - (shared_address(raw) & 1023)) & 1023);
}
#endif

// dq over a pair of query tiles of one head: key blocks 0..the pair's last, warpgroup 0 stopping
// at its own diagonal block.
template <typename T, int D>
__global__ void __launch_bounds__(256, 1)
    dq_pair_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, T* dq, const AttentionBackwardTile* tiles,
                   AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaPairTile<T, D>;
  constexpr int BN = Tile::block, S = Tile::stages, ahead = Tile::ahead;
  constexpr int tile_bytes = Tile::tile_bytes;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = pair_shared_memory(shared_raw);
  // w and the block counts read from lane 0: the same in every lane for ptxas too, which then
  // keeps the loop, the stages and the wgmma descriptors in uniform registers.
  const int thread = static_cast<int>(threadIdx.x), w = __shfl_sync(0xffffffffu, thread / 128, 0);
  unsigned char* q_s = shared + w * 2 * tile_bytes;  // this warpgroup's Q, then dO
  unsigned char* do_s = q_s + tile_bytes;
  unsigned char* k_s = shared + 4 * tile_bytes;  // [stages][panels][keys][128 bytes]
  unsigned char* v_s = k_s + S * tile_bytes;
  const PairPipeline<S> pipeline(v_s + S * tile_bytes);

  const AttentionBackwardTile tile = tiles[blockIdx.x / shape.heads];
  const int h = static_cast<int>(blockIdx.x % shape.heads),
            kv_head = h / (shape.heads / shape.kv_heads);
  const int warp = (thread % 128) / warp_size, lane = thread % warp_size;
  const int g = lane >> 2, t = lane & 3;
  const PairRows rows(tile, w);
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const int last_position = tile.start_position + tile.count - 1,
            last_block = __shfl_sync(0xffffffffu, last_position / BN, 0);
  const int own_last_block =
      __shfl_sync(0xffffffffu, rows.count > 0 ? (rows.start + rows.count - 1) / BN : -1, 0);
  const T* k_sequence = k + tile.sequence_slot * kv_stride + kv_head * D;  // key of position 0
  const T* v_sequence = v + tile.sequence_slot * kv_stride + kv_head * D;
  pipeline.init(thread);
  // This warpgroup's Q and dO (rows past its tile's become zeros).
  const std::int64_t own_first = (tile.first_slot + 64 * w) * q_stride + h * D;
  load_swizzled_async<T, D, 64, 128>(q_s, q + own_first, q_stride, rows.count, thread % 128);
  load_swizzled_async<T, D, 64, 128>(do_s, dout + own_first, q_stride, rows.count, thread % 128);
  copy_async_commit();
  __syncthreads();  // the barriers are initialized

  auto load_block = [&](int block) {  // keys past the pair's last query become zeros
    pipeline.fill(block, [&](int stage) {
      const int valid_keys = last_position - block * BN + 1;
      load_swizzled_async<T, D, BN, Tile::threads>(
          k_s + stage * tile_bytes, k_sequence + block * BN * kv_stride, kv_stride, valid_keys);
      load_swizzled_async<T, D, BN, Tile::threads>(
          v_s + stage * tile_bytes, v_sequence + block * BN * kv_stride, kv_stride, valid_keys);
    });
  };
  pipeline.start<ahead>(last_block + 1, w, load_block);  // and this warpgroup's Q and dO

  const int r0 = warp * 16;
  const int warp_first_position = rows.start + r0;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  const float scale_log2 = shape.scale * log2_e;
  float lse_log2[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    const std::int64_t at =
        (tile.first_slot + 64 * w + row) * static_cast<std::int64_t>(shape.heads) + h;
    lse_log2[r] = row < rows.count ? __fmul_rn(lse[at], log2_e) : 0.0f;
    row_delta[r] = row < rows.count ? delta[at] : 0.0f;
  }
  const std::uint64_t q_descriptor = operand_descriptor(shared_address(q_s)),
                      do_descriptor = operand_descriptor(shared_address(do_s));

  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

  // (Issuing block b + 1's S and dP with block b's dQ product and waiting for both at once ran
  // 6-12 % slower on an H100.)
  for (int block = 0; block <= last_block; ++block) {
    if (block + ahead <= last_block) load_block(block + ahead);
    const int stage = block % S;
    pipeline.wait(block);
    if (block <= own_last_block) {             // else: past this warpgroup's keys
      async_copy::fence_proxy_async_shared();  // cp.async wrote the stage; wgmma reads it
      dq_block<T, D>(acc, q_descriptor, do_descriptor, shared_address(k_s + stage * tile_bytes),
                     shared_address(v_s + stage * tile_bytes), block, warp_first_position, position,
                     t, scale_log2, lse_log2, row_delta);
    }
    pipeline.release(block, lane);
  }
  // The warpgroup's own Q and dO become its output staging once all its warps are past them.
  async_copy::named_barrier_sync(1 + w, 128);
  if (r0 >= rows.count) return;  // padding only; no barrier follows
  T* staging = reinterpret_cast<T*>(q_s) + r0 * WgmmaBackwardTile<T, D>::staging_stride;
  store_warp_rows<T, D>(staging, acc, shape.scale,
                        dq + (tile.first_slot + 64 * w + r0) * q_stride + h * D, q_stride,
                        rows.count - r0, lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// dk, dv over a pair of key tiles of one KV head: the steps of BackwardKeySteps from the pair's
// first block (the heads of the group in order and, per head, the query blocks from the pair's
// first to the sequence's last), warpgroup 1 skipping each head's first block.
template <typename T, int D>
__global__ void __launch_bounds__(256, 1)
    dkdv_pair_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                     const float* delta, T* dk, T* dv, const AttentionBackwardTile* tiles,
                     AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_SM90A
  using Tile = WgmmaPairTile<T, D>;
  constexpr int BM = Tile::block, S = Tile::stages, ahead = Tile::ahead;
  constexpr int tile_bytes = Tile::tile_bytes;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = pair_shared_memory(shared_raw);
  // w and the step counts read from lane 0 (as in dq_pair_kernel).
  const int thread = static_cast<int>(threadIdx.x), w = __shfl_sync(0xffffffffu, thread / 128, 0);
  unsigned char* k_s = shared + w * 2 * tile_bytes;  // this warpgroup's K, then V
  unsigned char* v_s = k_s + tile_bytes;
  unsigned char* q_s = shared + 4 * tile_bytes;  // [stages][panels][queries][128 bytes]
  unsigned char* do_s = q_s + S * tile_bytes;
  float* lse_s = reinterpret_cast<float*>(do_s + S * tile_bytes);  // [stages][queries]
  float* delta_s = lse_s + S * BM;                                 // [stages][queries]
  const PairPipeline<S> pipeline(reinterpret_cast<unsigned char*>(delta_s + S * BM));

  const AttentionBackwardTile tile = tiles[blockIdx.x / shape.kv_heads];
  const int kv_head = static_cast<int>(blockIdx.x % shape.kv_heads),
            group = shape.heads / shape.kv_heads;
  const int warp = (thread % 128) / warp_size, lane = thread % warp_size;
  const int g = lane >> 2, t = lane & 3;
  const PairRows rows(tile, w);
  const std::int64_t q_stride = static_cast<std::int64_t>(shape.heads) * D,
                     kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  BackwardKeySteps<BM> steps(tile, kv_head, group);
  steps.first_block = __shfl_sync(0xffffffffu, steps.first_block, 0);
  steps.blocks_per_head = __shfl_sync(0xffffffffu, steps.blocks_per_head, 0);
  steps.count = __shfl_sync(0xffffffffu, steps.count, 0);
  pipeline.init(thread);
  const std::int64_t own_first = (tile.first_slot + 64 * w) * kv_stride + kv_head * D;
  load_swizzled_async<T, D, 64, 128>(k_s, k + own_first, kv_stride, rows.count, thread % 128);
  load_swizzled_async<T, D, 64, 128>(v_s, v + own_first, kv_stride, rows.count, thread % 128);
  copy_async_commit();
  __syncthreads();  // the barriers are initialized

  auto load_step = [&](int step) {  // queries past the sequence become zeros
    pipeline.fill(step, [&](int stage) {
      const int h = steps.head(step), first_query = steps.first_query(step);
      const int valid_queries = tile.sequence_length - first_query;
      const std::int64_t first_row = tile.sequence_slot + first_query;
      load_swizzled_async<T, D, BM, Tile::threads>(
          q_s + stage * tile_bytes, q + first_row * q_stride + h * D, q_stride, valid_queries);
      load_swizzled_async<T, D, BM, Tile::threads>(
          do_s + stage * tile_bytes, dout + first_row * q_stride + h * D, q_stride, valid_queries);
      if (thread < 2 * BM) {  // threads 0..63 the lse, 64..127 the delta
        const int i = thread % BM;
        const std::int64_t at = (first_row + i) * shape.heads + h;
        const float* source = thread < BM ? lse : delta;
        copy_async_4((thread < BM ? lse_s : delta_s) + stage * BM + i,
                     i < valid_queries ? source + at : source, i < valid_queries);
      }
    });
  };
  pipeline.start<ahead>(steps.count, w, load_step);  // and this warpgroup's K and V

  const int r0 = warp * 16;
  const int key_position[2] = {rows.start + r0 + g, rows.start + r0 + g + 8};
  const float scale_log2 = shape.scale * log2_e;
  const std::uint32_t k_address = shared_address(k_s), v_address = shared_address(v_s);

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[dt][e] = dv_acc[dt][e] = 0.0f;
  }

  // (Issuing the next step's S and dP with this step's dV and dK would keep both products'
  // registers live at once: ptxas spilled 124 bytes.)
  for (int step = 0; step < steps.count; ++step) {
    if (step + ahead < steps.count) load_step(step + ahead);
    const int stage = step % S, first_query = steps.first_query(step);
    pipeline.wait(step);
    if (rows.count > 0 && first_query >= rows.start) {  // else: before this warpgroup's keys
      async_copy::fence_proxy_async_shared();           // cp.async wrote the stage; wgmma reads it
      dkdv_block<T, D, true>(
          dk_acc, dv_acc, k_address, v_address, shared_address(q_s + stage * tile_bytes),
          shared_address(do_s + stage * tile_bytes), lse_s + stage * BM, delta_s + stage * BM,
          first_query, rows.start, key_position, tile.sequence_length, t, scale_log2);
    }
    pipeline.release(step, lane);
  }
  // The warpgroup's own K and V become its output staging once all its warps are past them.
  async_copy::named_barrier_sync(1 + w, 128);
  if (r0 >= rows.count) return;  // padding only; no barrier follows
  const std::int64_t out_row = (tile.first_slot + 64 * w + r0) * kv_stride + kv_head * D;
  T* staging = reinterpret_cast<T*>(k_s) + r0 * WgmmaBackwardTile<T, D>::staging_stride;
  store_warp_rows<T, D>(staging, dk_acc, shape.scale, dk + out_row, kv_stride, rows.count - r0,
                        lane);
  store_warp_rows<T, D>(staging, dv_acc, 1.0f, dv + out_row, kv_stride, rows.count - r0, lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

template <typename T, int D>
void launch(const T* q, const T* k, const T* v, const float* lse, const T* dout, const float* delta,
            T* dq, T* dk, T* dv, const AttentionBackwardTiles& tiles, AttentionShape shape,
            CUstream_st* stream) {
  if constexpr (D == 128) {
    using Tile = WgmmaPairTile<T, D>;
    static bool configured = false;
    launch_backward_kernels<T>(dq_pair_kernel<T, D>, Tile::dq_shared_bytes, dkdv_pair_kernel<T, D>,
                               Tile::dkdv_shared_bytes, Tile::threads, configured, q, k, v, lse,
                               dout, delta, dq, dk, dv, tiles.queries, tiles.keys, tiles.count,
                               shape, stream);
  } else {
    using Tile = WgmmaBackwardTile<T, D>;
    static bool configured = false;
    launch_backward_kernels<T>(dq_wgmma_kernel<T, D>, Tile::dq_shared_bytes,
                               dkdv_wgmma_kernel<T, D>, Tile::dkdv_shared_bytes, Tile::threads,
                               configured, q, k, v, lse, dout, delta, dq, dk, dv, tiles.queries,
                               tiles.keys, tiles.count, shape, stream);
  }
}

}  // namespace

void launch_backward_wgmma(DeviceDType dtype, const void* q, const void* k, const void* v,
                           const float* lse, const void* dout, const float* delta, void* dq,
                           void* dk, void* dv, const AttentionBackwardTiles& tiles,
                           AttentionShape shape, CUstream_st* stream) {
  if (dtype != DeviceDType::bf16 && dtype != DeviceDType::fp16)
    throw std::invalid_argument("attention backward (wgmma): bf16/fp16 only");
  dispatch_tensor_core(dtype, shape.dim, [&](auto tag, auto dim) {
    using T = decltype(tag);
    launch<T, decltype(dim)::value>(static_cast<const T*>(q), static_cast<const T*>(k),
                                    static_cast<const T*>(v), lse, static_cast<const T*>(dout),
                                    delta, static_cast<T*>(dq), static_cast<T*>(dk),
                                    static_cast<T*>(dv), tiles, shape, stream);
  });
}

}  // namespace bitcheck::cuda
