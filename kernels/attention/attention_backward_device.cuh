// Device code shared by the attention backward kernels (attention_backward_mma_simt.cu: mma.sync;
// attention_backward_wgmma.cu: wgmma): the order of a dk/dv tile's steps, the staging of a step's
// lse and delta, the stores of a warp's gradient rows, and the launch of a dq, dk/dv kernel pair.
// Included only by .cu files.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <stdexcept>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "common/cuda_check.cuh"

namespace bitcheck::cuda::attention_device {

// A warp's 16 accumulator rows (times `scale`, rounded to T) staged in its own shared rows, then
// stored as 16-byte chunks to rows first_row.. of `out` (rows past `valid_rows` are padding).
template <typename T, int D>
__device__ __forceinline__ void store_warp_rows(T* staging, const float (&acc)[D / 8][4],
                                                float scale, T* out, std::int64_t row_stride,
                                                int valid_rows, int lane) {
  constexpr int stride = D + 8, chunks = D / 8;
  const int g = lane >> 2, t = lane & 3;
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<std::uint32_t*>(staging + (g + 8 * r) * stride + dt * 8 + 2 * t) =
          pack_pair<T>(__fmul_rn(acc[dt][2 * r], scale), __fmul_rn(acc[dt][2 * r + 1], scale));
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16 * chunks / warp_size; ++i) {
    const int chunk = lane + i * warp_size, row = chunk / chunks, column = chunk % chunks * 8;
    if (row >= valid_rows) continue;
    *reinterpret_cast<uint4*>(out + row * row_stride + column) =
        *reinterpret_cast<const uint4*>(staging + row * stride + column);
  }
}

// The steps of a dk/dv tile in the order its sums take them: the heads of the KV group in order
// and, per head, the query blocks of Block rows from the tile's own block to the end of the
// sequence. Both tensor-core backwards walk them, so a key's dk and dv add the same terms in the
// same order whichever kernel runs.
template <int Block>
struct BackwardKeySteps {
  int first_head, first_block, blocks_per_head, count;
  __device__ BackwardKeySteps(const AttentionBackwardTile& tile, int kv_head, int group)
      : first_head(kv_head * group),
        first_block(tile.start_position / Block),
        blocks_per_head((tile.sequence_length - 1) / Block - tile.start_position / Block + 1),
        count(group * blocks_per_head) {}
  __device__ int head(int step) const { return first_head + step / blocks_per_head; }
  __device__ int first_query(int step) const {
    return (first_block + step % blocks_per_head) * Block;
  }
};

// A step's lse times log2 e and delta into one stage of Block floats each (threads 0..Block-1 the
// lse, Block..2 Block-1 the delta), for queries at rows first_row.. of head h; zeros at and past
// valid_queries.
template <int Block>
__device__ __forceinline__ void stage_lse_delta(float* lse_stage, float* delta_stage,
                                                const float* lse, const float* delta,
                                                std::int64_t first_row, int heads, int h,
                                                int valid_queries) {
  const int i = static_cast<int>(threadIdx.x) % Block;
  const std::int64_t at = (first_row + i) * heads + h;
  if (threadIdx.x < Block) {
    lse_stage[i] = i < valid_queries ? __fmul_rn(lse[at], log2_e) : 0.0f;
  } else {
    delta_stage[i] = i < valid_queries ? delta[at] : 0.0f;
  }
}

// The lse times log2 e and the delta of this thread's two query rows of a tile (rows r0 + g and
// r0 + g + 8, head h), 0 for rows past the tile's count.
__device__ __forceinline__ void load_row_lse_delta(float (&lse_log2)[2], float (&row_delta)[2],
                                                   const float* lse, const float* delta,
                                                   const AttentionBackwardTile& tile, int heads,
                                                   int h, int r0, int g) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    const std::int64_t at = (tile.first_slot + row) * static_cast<std::int64_t>(heads) + h;
    lse_log2[r] = row < tile.count ? __fmul_rn(lse[at], log2_e) : 0.0f;
    row_delta[r] = row < tile.count ? delta[at] : 0.0f;
  }
}

// ds in place of s for key block `block` (BN keys) of this thread's two query rows of dq:
// p = 2^(s·scale·log2 e − lse·log2 e), ds = p·(dp − delta), exactly 0 for a key past the row's
// position; the causal mask is tested only where the block reaches past the warp's first row.
template <int BN>
__device__ __forceinline__ void key_block_ds(float (&s)[BN / 8][4], const float (&dp)[BN / 8][4],
                                             int block, int warp_first_position,
                                             const int (&position)[2], int t, float scale_log2,
                                             const float (&lse_log2)[2],
                                             const float (&row_delta)[2]) {
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
}

// A CTA over one KV head of one tile of key rows (blockIdx.x = tile index * kv_heads + kv_head),
// which walks the steps of `steps` (the dk/dv kernels), and this thread in it. The members are in
// the order the kernels compute them: another order changes the kernels' compiled code.
template <int D, int Block>
struct KeyTileCta {
  AttentionBackwardTile tile;
  int kv_head, group;
  CtaThread<D> thread;
  BackwardKeySteps<Block> steps;
  __device__ __forceinline__ KeyTileCta(const AttentionBackwardTile* tiles, AttentionShape shape)
      : tile(tiles[blockIdx.x / shape.kv_heads]),
        kv_head(static_cast<int>(blockIdx.x % shape.kv_heads)),
        group(shape.heads / shape.kv_heads),
        thread(shape),
        steps(tile, kv_head, group) {}
  // The tile's K and V rows of this KV head into k_s and v_s (by load_tile_rows; keys past the tile
  // as zeros).
  template <bool Swizzled, typename T, int rows, int threads, typename Shared>
  __device__ __forceinline__ void load_keys(Shared* k_s, Shared* v_s, const T* k,
                                            const T* v) const {
    load_tile_rows<Swizzled, T, D, rows, threads>(
        k_s, k + tile.first_slot * thread.kv_stride + kv_head * D, thread.kv_stride, tile.count);
    load_tile_rows<Swizzled, T, D, rows, threads>(
        v_s, v + tile.first_slot * thread.kv_stride + kv_head * D, thread.kv_stride, tile.count);
  }
  // Step `step`'s queries into stage `stage` (the Q and dO buffers at q_s and do_s, stage_size
  // elements or bytes a stage, by load_tile_rows; lse times log2 e and delta at lse_s and delta_s,
  // Block floats a stage): the Q and dO rows of its head from its first query, queries past the
  // sequence as zeros.
  template <bool Swizzled, typename T, int threads, typename Shared>
  __device__ __forceinline__ void load_step(Shared* q_s, Shared* do_s, int stage_size, float* lse_s,
                                            float* delta_s, int step, int stage, const T* q,
                                            const T* dout, const float* lse, const float* delta,
                                            int heads) const {
    const int h = steps.head(step), first_query = steps.first_query(step);
    const int valid_queries = tile.sequence_length - first_query;
    const std::int64_t first_row = tile.sequence_slot + first_query;
    load_tile_rows<Swizzled, T, D, Block, threads>(q_s + stage * stage_size,
                                                   q + first_row * thread.q_stride + h * D,
                                                   thread.q_stride, valid_queries);
    load_tile_rows<Swizzled, T, D, Block, threads>(do_s + stage * stage_size,
                                                   dout + first_row * thread.q_stride + h * D,
                                                   thread.q_stride, valid_queries);
    stage_lse_delta<Block>(lse_s + stage * Block, delta_s + stage * Block, lse, delta, first_row,
                           heads, h, valid_queries);
  }
};

// The two kernels of a tensor-core backward over the same tiles: dq_kernel on tile_count x heads
// CTAs, then dkdv_kernel on tile_count x kv_heads CTAs, each with `threads` threads and its dynamic
// shared memory (the limit raised on the first launch: `configured`, one flag per kernel pair).
template <typename T>
using BackwardDqKernel = void (*)(const T*, const T*, const T*, const T*, const float*,
                                  const float*, T*, const AttentionBackwardTile*, AttentionShape);
template <typename T>
using BackwardDkdvKernel = void (*)(const T*, const T*, const T*, const T*, const float*,
                                    const float*, T*, T*, const AttentionBackwardTile*,
                                    AttentionShape);
template <typename T>
void launch_backward_kernels(BackwardDqKernel<T> dq_kernel, int dq_shared_bytes,
                             BackwardDkdvKernel<T> dkdv_kernel, int dkdv_shared_bytes, int threads,
                             bool& configured, const T* q, const T* k, const T* v, const float* lse,
                             const T* dout, const float* delta, T* dq, T* dk, T* dv,
                             const AttentionBackwardTile* query_tiles,
                             const AttentionBackwardTile* key_tiles, int tile_count,
                             AttentionShape shape, CUstream_st* stream) {
  if (!configured) {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            dq_shared_bytes));
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(
        dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dkdv_shared_bytes));
    configured = true;
  }
  const std::int64_t dq_ctas = static_cast<std::int64_t>(tile_count) * shape.heads;
  if (dq_ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention backward: tiles * heads exceeds the grid");
  dq_kernel<<<static_cast<unsigned>(dq_ctas), threads, dq_shared_bytes, stream>>>(
      q, k, v, dout, lse, delta, dq, query_tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
  const std::int64_t dkdv_ctas = static_cast<std::int64_t>(tile_count) * shape.kv_heads;
  dkdv_kernel<<<static_cast<unsigned>(dkdv_ctas), threads, dkdv_shared_bytes, stream>>>(
      q, k, v, dout, lse, delta, dk, dv, key_tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda::attention_device
