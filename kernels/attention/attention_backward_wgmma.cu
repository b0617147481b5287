// The attention backward on wgmma (sm_90a): the same two kernels and the same sums as the mma.sync
// backward of attention_kernels.cu (dq per 64-query tile over key blocks in order; dk, dv per
// 64-key tile over the heads of the group in order and, per head, over query blocks from the key's
// own block to the end of the sequence), with each block's products issued as warpgroup MMAs.
//
// What keeps a row's bits independent of the batch: a CTA is one warpgroup holding one tile of 64
// rows of one sequence, starting at a multiple of 64 (AttentionBackwardTile), so the blocks a row
// visits and their order follow from its own position and sequence length. Each product element
// comes from its own row and column only (wgmma m64n64k16 over the head dim in D/16 k-steps in
// order for S and dP; m64nDk16 over the block in four 16-row k-steps in order for dQ, dK and dV),
// the causal mask is per element (masked p and ds are exact zeros), and the p and ds arithmetic
// is explicitly rounded (__fmaf_rn, __fmul_rn, __fsub_rn) as in the mma.sync kernels. No atomics:
// every output element is written once, by the CTA that owns its row.
//
// Scheduling: two CTAs per SM at head dim 128, three at 64, each a synchronous pipeline
// (cp.async loads of the next block in flight under the current block's products), so one CTA's
// exponentials overlap the other's MMAs. Operands sit in 128-byte swizzled panels of 64 elements
// (load_swizzled_async): row r's 16-byte chunk c at r * 128 + ((c ^ (r % 8)) * 16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "common/cuda_check.cuh"
#include "common/wgmma.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BITCHECK_ATTENTION_BACKWARD_SM90A 1
#endif

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
};

template <typename T, int D>
__device__ __forceinline__ void rs_m64nd(float (&acc)[D / 8][4], const std::uint32_t (&a)[4],
                                         std::uint64_t b) {
#ifdef BITCHECK_ATTENTION_BACKWARD_SM90A
  if constexpr (D == 128) {
    wgmma::rs_m64n128k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), a, b);
  } else {
    wgmma::rs_m64n64k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), a, b);
  }
#endif
}

// s = A·Bᵀ and dp = A2·B2ᵀ of a 64 x 64 block over the head dim, D/16 k-steps in order each; A
// operands are 64-row tiles, B operands 64-row blocks, both K-major in swizzled panels.
template <typename T, int D>
__device__ __forceinline__ void paired_scores(float (&s)[8][4], float (&dp)[8][4], std::uint32_t a1,
                                              std::uint32_t b1, std::uint32_t a2,
                                              std::uint32_t b2) {
#ifdef BITCHECK_ATTENTION_BACKWARD_SM90A
  constexpr int panel = WgmmaBackwardTile<T, D>::panel_bytes;
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint32_t at = (kk / 4) * panel + (kk % 4) * 32;
    wgmma::ss_m64n64k16<T>(reinterpret_cast<float(&)[32]>(s), wgmma::descriptor(a1 + at, 16, 1024),
                           wgmma::descriptor(b1 + at, 16, 1024), kk > 0);
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint32_t at = (kk / 4) * panel + (kk % 4) * 32;
    wgmma::ss_m64n64k16<T>(reinterpret_cast<float(&)[32]>(dp), wgmma::descriptor(a2 + at, 16, 1024),
                           wgmma::descriptor(b2 + at, 16, 1024), kk > 0);
  }
  wgmma::commit();
  wgmma::wait_all();
#endif
}

// dq: one CTA (a warpgroup) per (query tile, head). Key blocks 0..the tile's own block stream
// through two shared stages in order; per block S = Q·Kᵀ and dP = dO·Vᵀ, then
// p = 2^(s·scale·log2 e − lse·log2 e), ds = p·(dp − delta) (masked: 0) and dQ += dS·K with dS from
// registers and K N-major. Only the tile's own block needs the causal mask.
template <typename T, int D>
__global__ void __launch_bounds__(128, 2)
    dq_wgmma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                    const float* delta, T* dq, const AttentionBackwardTile* tiles,
                    AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_BACKWARD_SM90A
  using Tile = WgmmaBackwardTile<T, D>;
  constexpr int BN = Tile::block, threads = Tile::threads;
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* q_s = shared;
  unsigned char* do_s = q_s + Tile::tile_bytes;
  unsigned char* k_s = do_s + Tile::tile_bytes;  // [stages][panels][keys][128 bytes]
  unsigned char* v_s = k_s + 2 * Tile::tile_bytes;

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
    load_swizzled_async<T, D, BN, threads>(
        k_s + stage * Tile::tile_bytes, k_sequence + block * BN * kv_stride, kv_stride, valid_keys);
    load_swizzled_async<T, D, BN, threads>(
        v_s + stage * Tile::tile_bytes, v_sequence + block * BN * kv_stride, kv_stride, valid_keys);
  };
  load_swizzled_async<T, D, Tile::rows, threads>(q_s, q + tile.first_slot * q_stride + h * D,
                                                 q_stride, tile.count);
  load_swizzled_async<T, D, Tile::rows, threads>(do_s, dout + tile.first_slot * q_stride + h * D,
                                                 q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();

  const int r0 = warp * 16;
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + g, warp_first_position + g + 8};
  const float scale_log2 = shape.scale * log2_e;
  float lse_log2[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    const std::int64_t at = (tile.first_slot + row) * static_cast<std::int64_t>(shape.heads) + h;
    lse_log2[r] = row < tile.count ? __fmul_rn(lse[at], log2_e) : 0.0f;
    row_delta[r] = row < tile.count ? delta[at] : 0.0f;
  }
  const std::uint32_t q_address = shared_address(q_s), do_address = shared_address(do_s);

  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

  for (int block = 0; block <= last_block; ++block) {
    copy_async_wait_all();  // this thread's copies of the block have landed
    __syncthreads();        // everyone's have, and nobody still reads the other stage
    if (block < last_block) load_block(block + 1, (block + 1) & 1);
    copy_async_commit();
    const int stage = block & 1;
    const std::uint32_t k_address = shared_address(k_s + stage * Tile::tile_bytes);
    const std::uint32_t v_address = shared_address(v_s + stage * Tile::tile_bytes);

    float s[BN / 8][4], dp[BN / 8][4];
    paired_scores<T, D>(s, dp, q_address, k_address, do_address, v_address);
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
    std::uint32_t dsa[BN / 16][4];
    pack_p_fragments<T, BN>(s, dsa);
    // dQ += dS·K: K (16 keys x D, N-major) per k-step, keys in order.
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      rs_m64nd<T, D>(acc, dsa[kc],
                     wgmma::descriptor(k_address + kc * 16 * 128, Tile::panel_bytes, 1024));
    }
    wgmma::commit();
    wgmma::wait_all();
  }
  __syncthreads();  // every warp is done with the K/V stages: they become the output staging
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  T* staging = reinterpret_cast<T*>(k_s) + r0 * Tile::staging_stride;
  store_warp_rows<T, D>(staging, acc, shape.scale, dq + (tile.first_slot + r0) * q_stride + h * D,
                        q_stride, tile.count - r0, lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// dk, dv: one CTA (a warpgroup) per (key tile, kv head). Steps in a fixed order: the heads of the
// group in order and, per head, the query blocks from the tile's own block to the end of the
// sequence; each step's Q, dO, lse·log2 e and delta stream through two shared stages. Per step
// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, pᵀ and dsᵀ as in dq (a query before the key, or past the sequence:
// exact zeros), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ, dSᵀ from registers and dO, Q N-major.
template <typename T, int D>
__global__ void __launch_bounds__(128, D == 64 ? 3 : 2)
    dkdv_wgmma_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                      const float* delta, T* dk, T* dv, const AttentionBackwardTile* tiles,
                      AttentionShape shape) {
#ifdef BITCHECK_ATTENTION_BACKWARD_SM90A
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
    load_swizzled_async<T, D, BM, threads>(
        q_s + stage * Tile::tile_bytes, q + first_row * q_stride + h * D, q_stride, valid_queries);
    load_swizzled_async<T, D, BM, threads>(do_s + stage * Tile::tile_bytes,
                                           dout + first_row * q_stride + h * D, q_stride,
                                           valid_queries);
    stage_lse_delta<BM>(lse_s + stage * BM, delta_s + stage * BM, lse, delta, first_row,
                        shape.heads, h, valid_queries);
  };

  load_swizzled_async<T, D, Tile::rows, threads>(k_s, k + tile.first_slot * kv_stride + kv_head * D,
                                                 kv_stride, tile.count);
  load_swizzled_async<T, D, Tile::rows, threads>(v_s, v + tile.first_slot * kv_stride + kv_head * D,
                                                 kv_stride, tile.count);
  load_step(0, 0);
  copy_async_commit();

  const int r0 = warp * 16;
  const int key_position[2] = {tile.start_position + r0 + g, tile.start_position + r0 + g + 8};
  const float scale_log2 = shape.scale * log2_e;
  const std::uint32_t k_address = shared_address(k_s), v_address = shared_address(v_s);

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
    const int stage = step & 1, first_query = steps.first_query(step);
    const std::uint32_t q_address = shared_address(q_s + stage * Tile::tile_bytes);
    const std::uint32_t do_address = shared_address(do_s + stage * Tile::tile_bytes);
    const float* lse_step = lse_s + stage * BM;
    const float* delta_step = delta_s + stage * BM;

    float s[BM / 8][4], dp[BM / 8][4];
    paired_scores<T, D>(s, dp, k_address, q_address, v_address, do_address);
    // pᵀ in place of s, dsᵀ in place of dp. Only the tile's own block (queries before a key) and
    // the sequence's last (queries past its end) mask anything; elsewhere the same arithmetic
    // runs without the per-element test.
    auto scores = [&](auto masking) {
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
        const int column = nt * 8 + 2 * t;
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
#pragma unroll
    for (int kc = 0; kc < BM / 16; ++kc) {
      rs_m64nd<T, D>(dv_acc, pa[kc],
                     wgmma::descriptor(do_address + kc * 16 * 128, Tile::panel_bytes, 1024));
    }
#pragma unroll
    for (int kc = 0; kc < BM / 16; ++kc) {
      rs_m64nd<T, D>(dk_acc, dsa[kc],
                     wgmma::descriptor(q_address + kc * 16 * 128, Tile::panel_bytes, 1024));
    }
    wgmma::commit();
    wgmma::wait_all();
  }
  __syncthreads();  // every warp is done with the stages: they become the output staging
  if (r0 >= tile.count) return;  // padding only; no barrier follows
  const std::int64_t out_row = tile.first_slot * kv_stride + kv_head * D + r0 * kv_stride;
  T* staging = reinterpret_cast<T*>(q_s) + r0 * Tile::staging_stride;
  store_warp_rows<T, D>(staging, dk_acc, shape.scale, dk + out_row, kv_stride, tile.count - r0,
                        lane);
  store_warp_rows<T, D>(staging, dv_acc, 1.0f, dv + out_row, kv_stride, tile.count - r0, lane);
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

template <typename T, int D>
void launch(const T* q, const T* k, const T* v, const float* lse, const T* dout, const float* delta,
            T* dq, T* dk, T* dv, const AttentionBackwardTile* query_tiles,
            const AttentionBackwardTile* key_tiles, int tile_count, AttentionShape shape,
            CUstream_st* stream) {
  using Tile = WgmmaBackwardTile<T, D>;
  static bool configured = false;
  launch_backward_kernels<T>(dq_wgmma_kernel<T, D>, Tile::dq_shared_bytes, dkdv_wgmma_kernel<T, D>,
                             Tile::dkdv_shared_bytes, Tile::threads, configured, q, k, v, lse, dout,
                             delta, dq, dk, dv, query_tiles, key_tiles, tile_count, shape, stream);
}

}  // namespace

void attention_backward_wgmma(DeviceDType dtype, const void* q, const void* k, const void* v,
                              const float* lse, const void* dout, const float* delta, void* dq,
                              void* dk, void* dv, const AttentionBackwardTile* query_tiles,
                              const AttentionBackwardTile* key_tiles, int tile_count,
                              AttentionShape shape, CUstream_st* stream) {
  auto run = [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value;
    launch<T, D>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), lse,
                 static_cast<const T*>(dout), delta, static_cast<T*>(dq), static_cast<T*>(dk),
                 static_cast<T*>(dv), query_tiles, key_tiles, tile_count, shape, stream);
  };
  using Dim64 = std::integral_constant<int, 64>;
  using Dim128 = std::integral_constant<int, 128>;
  if (dtype == DeviceDType::bf16) {
    shape.dim == 64 ? run(__nv_bfloat16{}, Dim64{}) : run(__nv_bfloat16{}, Dim128{});
  } else if (dtype == DeviceDType::fp16) {
    shape.dim == 64 ? run(__half{}, Dim64{}) : run(__half{}, Dim128{});
  } else {
    throw std::invalid_argument("attention backward (wgmma): bf16/fp16 only");
  }
}

}  // namespace bitcheck::cuda
