// The decode-like launches of the attention forward and the split-KV merges: the warp-specialized
// kernel (attention_forward_ws.cuh) on tiles of at most 16 queries, one consumer warpgroup per CTA
// and a CTA per 2048-key chunk; merge_chunks_kernel, which joins a split decode's chunk states;
// combine_kernel, which joins the splits of the SIMT split-KV control. attention_plan.cu plans the
// launches and records their paths.
//
// Kernels:
//   forward_ws_kernel<T, 128, 1, 32, 4>  one CTA per SM on 4 stages:
//       forward.wgmma.decode[.packed-heads][.split-kv] with forward.wgmma.decode-ctas.one-per-sm
//   forward_ws_kernel<T, 128, 1, 32, 2>  two CTAs per SM on 2 stages each: the same decode paths
//       with forward.wgmma.decode-ctas.two-per-sm
//   forward_ws_kernel<T, 128, 1, 0, 2>   test only, no chunks: forward.wgmma.unchunked
//   merge_chunks_kernel<T, 128>          a warp per (query, head) of a split decode tile:
//       forward.wgmma.decode[.packed-heads].split-kv
//   combine_kernel<T>                    a warp per (query, head), after a split SIMT forward:
//       forward.simt.split-kv (the control)
//
// Why a row's bits do not depend on the batch: its chunks are fixed by its position alone (2048
// keys, aligned to position 0), and a decode CTA computes a chunk's state, and merge_chunks_kernel
// joins the states in chunk order, with the operations of a prefill CTA (chunk_merge_weights,
// merge_element, output_element, row_lse in attention_device.cuh), so a decoded row gets the bits
// of the same row prefilled however many CTAs its step launched. combine_kernel sums its splits in
// order too, but the splits come from the batch: that is the control's drift.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_device.cuh"
#include "attention_forward_ws.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

// Split-KV merge: one warp per (query, head) of a tile split over chunks; chunks 0..position / 2048
// in order, the first one's state taken as it is, each later one merged with chunk_merge_weights
// and merge_element as a prefill CTA merges it; then o and lse as store_rows_reduced computes
// them. Lane i holds dims [i * D / 32, (i + 1) * D / 32).
template <typename T, int D>
__global__ void merge_chunks_kernel(const float* partials, T* o, float* lse,
                                    const AttentionTile* tiles, const AttentionMergeTask* tasks,
                                    int task_count, int max_queries, AttentionShape shape) {
  constexpr int per_lane = D / warp_size;
  const std::int64_t warp_index =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const std::int64_t per_task = static_cast<std::int64_t>(shape.heads) * max_queries;
  const std::int64_t task_index = warp_index / per_task;
  if (task_index >= task_count) return;
  const AttentionMergeTask task = tasks[task_index];
  const AttentionTile tile = tiles[task.tile];
  const int h = static_cast<int>(warp_index % per_task / max_queries),
            query = static_cast<int>(warp_index % max_queries);
  if (query >= tile.count) return;
  const int chunks = (tile.start_position + query) / attention_chunk_keys + 1;
  const float scale_log2 = shape.scale * log2_e;
  auto partial_of = [&](int c) {
    return partials + (task.partial_base +
                       (static_cast<std::int64_t>(c) * shape.heads + h) * tile.count + query) *
                          (D + 2);
  };
  float A[per_lane];
  const float* first = partial_of(0);
#pragma unroll
  for (int i = 0; i < per_lane; ++i) A[i] = first[lane * per_lane + i];
  float M = first[D], L = first[D + 1];
  for (int c = 1; c < chunks; ++c) {
    const float* partial = partial_of(c);
    const float m = partial[D];
    if (m == -INFINITY) continue;
    float a, b;
    chunk_merge_weights(M, L, m, partial[D + 1], scale_log2, a, b);
#pragma unroll
    for (int i = 0; i < per_lane; ++i)
      A[i] = merge_element(A[i], a, partial[lane * per_lane + i], b);
  }
  const int slot = tile.first_slot + query;
  T* out = o + (static_cast<std::int64_t>(slot) * shape.heads + h) * D + lane * per_lane;
#pragma unroll
  for (int i = 0; i < per_lane; ++i) out[i] = output_element<T>(A[i], L);
  if (lane == 0) lse[static_cast<std::int64_t>(slot) * shape.heads + h] = row_lse(M, L, scale_log2);
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

}  // namespace

void launch_forward_ws_decode(const AttentionWsLaunch& launch, CUstream_st* stream) {
  const WsTensorMaps maps = ws_tensor_maps(launch);
  dispatch_ws(launch.dtype, [&](auto tag) {
    using T = decltype(tag);
    const WsParams<T> params = ws_params<T>(launch);
    if (!launch.chunked) {
      launch_ws<T, ws_dim, 1, 0, 2>(maps.q, maps.k, maps.v, params,
                                    static_cast<std::int64_t>(launch.tile_count) * params.units,
                                    stream);
      return;
    }
    const std::int64_t ctas = static_cast<std::int64_t>(launch.item_count) * params.units;
    if (launch.ctas_per_sm == 1) {
      launch_ws<T, ws_dim, 1, chunk_blocks, 4>(maps.q, maps.k, maps.v, params, ctas, stream);
    } else {
      launch_ws<T, ws_dim, 1, chunk_blocks, 2>(maps.q, maps.k, maps.v, params, ctas, stream);
    }
  });
}

void launch_merge_chunks(DeviceDType dtype, const float* partials, void* o, float* lse,
                         const AttentionTile* tiles, const AttentionMergeTask* tasks,
                         int task_count, int max_queries, AttentionShape shape,
                         CUstream_st* stream) {
  constexpr int threads = 128;
  const std::int64_t warps = static_cast<std::int64_t>(task_count) * shape.heads * max_queries;
  dispatch_ws(dtype, [&](auto tag) {
    using T = decltype(tag);
    merge_chunks_kernel<T, ws_dim>
        <<<static_cast<unsigned>((warps * warp_size + threads - 1) / threads), threads, 0,
           stream>>>(partials, static_cast<T*>(o), lse, tiles, tasks, task_count, max_queries,
                     shape);
    BITCHECK_CUDA_LAUNCH_CHECK();
  });
}

void launch_combine_splits(DeviceDType dtype, const float* scratch, void* o, float* lse,
                           const AttentionToken* tokens, int token_count, AttentionShape shape,
                           int splits, CUstream_st* stream) {
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    combine_kernel<T><<<warp_grid(items), simt_warps * warp_size, 0, stream>>>(
        scratch, static_cast<T*>(o), lse, tokens, token_count, shape, splits);
    BITCHECK_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace bitcheck::cuda
