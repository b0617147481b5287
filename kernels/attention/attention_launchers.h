// The launchers of the attention kernel families, which the planning code (attention_plan.cu) calls
// once it has checked the arguments, picked the kernel and recorded its path, and the plans it
// hands them. Each launcher resolves dtype and head dim and launches its family's kernels (one file
// each); none records a path. Plain C++ header.
#pragma once
#include <cstdint>

#include "attention_kernels.h"

struct CUstream_st;  // cudaStream_t without CUDA headers; nullptr is the default stream.

namespace bitcheck::cuda {

// One CTA of a split-KV decode launch (per unit of heads): chunk `chunk` of tile `tile`.
// partial_base: the tile's first partial state in the scratch, or -1 when the tile's rows all end
// in chunk 0 (the CTA then stores o and lse itself).
struct AttentionWorkItem {
  int tile;
  int chunk;
  std::int64_t partial_base;
};

// A split decode tile whose chunk states the merge kernel joins: its first partial state in the
// scratch (chunk c, head h, query i at partial_base + (c * heads + h) * tile.count + i).
struct AttentionMergeTask {
  int tile;
  std::int64_t partial_base;
};

// One launch of the warp-specialized forward as AttentionForwardLaunch planned it.
struct AttentionWsLaunch {
  DeviceDType dtype;
  AttentionShape shape;
  const void* q;
  const void* k_cache;
  const void* v_cache;
  void* o;
  float* lse;
  std::int64_t cache_rows;  // rows of the KV cache (the TMA loads are bounded by it)
  std::int64_t query_rows;  // slots of q the tiles reach
  const AttentionTile* tiles;
  int tile_count;
  const AttentionWorkItem* items;  // split decode: its work items
  int item_count;
  const int* order;  // prefill: the order CTAs take work items (attention_prefill_order)
  float* partials;   // split decode: chunk states, (dim + 2) floats each
  int* next_item;    // prefill: the work counter of the persistent CTAs
  bool decode;       // decode-like (one consumer warpgroup per CTA), else prefill (two)
  bool chunked;      // split at attention_chunk_keys (false: the test-only unchunked kernels)
  int pack;          // decode: heads sharing a CTA (1, or the KV group's size)
  bool pingpong;     // prefill: the consumer warpgroups issue their products in turns
  int ctas_per_sm;   // chunked decode: 1 (4 stages) or 2 (2 stages each)
};

// SMs of the current device, queried once per device (attention_plan.cu): the persistent prefill
// grid and the decode CTA shape are sized by it.
int attention_multiprocessor_count();

// The warp-specialized kernel of `launch`: attention_forward_ws.cu for prefill,
// attention_decode.cu for decode-like launches (their chunks merged by launch_merge_chunks).
void launch_forward_ws_prefill(const AttentionWsLaunch& launch, CUstream_st* stream);
void launch_forward_ws_decode(const AttentionWsLaunch& launch, CUstream_st* stream);

// attention_forward_wgmma_synchronous.cu (sm_90 only; bf16/fp16, head dim 64 or 128): decode-like
// launches on forward_wgmma_kernel, a KV group's heads per CTA with pack_heads; prefill on the
// producer-warpgroup kernel.
void launch_forward_wgmma_synchronous(DeviceDType dtype, const void* q, const void* k_cache,
                                      const void* v_cache, void* o, float* lse,
                                      const AttentionTile* tiles, int tile_count,
                                      std::int64_t cache_rows, AttentionShape shape,
                                      bool decode_like, bool pack_heads, CUstream_st* stream);

// attention_forward_mma_simt.cu: the mma.sync forward (bf16/fp16, head dim 64 or 128), and the SIMT
// forward (with splits > 1 its partial states into scratch, for launch_combine_splits).
void launch_forward_mma_sync(DeviceDType dtype, const void* q, const void* k_cache,
                             const void* v_cache, void* o, float* lse, const AttentionTile* tiles,
                             int tile_count, AttentionShape shape, CUstream_st* stream);
void launch_forward_simt(DeviceDType dtype, const void* q, const void* k_cache, const void* v_cache,
                         void* o, float* lse, const AttentionToken* tokens, int token_count,
                         AttentionShape shape, int kv_block, int splits, float* scratch,
                         CUstream_st* stream);

// attention_decode.cu: the chunk states of `tasks` (tiles of up to max_queries queries)
// merged into o and lse; the SIMT forward's `splits` partial states per (token, head) likewise.
void launch_merge_chunks(DeviceDType dtype, const float* partials, void* o, float* lse,
                         const AttentionTile* tiles, const AttentionMergeTask* tasks,
                         int task_count, int max_queries, AttentionShape shape,
                         CUstream_st* stream);
void launch_combine_splits(DeviceDType dtype, const float* scratch, void* o, float* lse,
                           const AttentionToken* tokens, int token_count, AttentionShape shape,
                           int splits, CUstream_st* stream);

// attention_backward_mma_simt.cu: delta = rowsum(do * o), which every backward computes first; the
// SIMT dq, dk and dv (with dq_atomic_scratch, the atomic-dq control over blocks_per_query 64-key
// blocks); the mma.sync dq and dk/dv kernels (bf16/fp16, head dim 64 or 128, tiles of
// attention_mma_backward_tile rows).
void launch_backward_delta(DeviceDType dtype, const void* o, const void* dout, float* delta,
                           const AttentionToken* tokens, int token_count, AttentionShape shape,
                           CUstream_st* stream);
void launch_backward_simt(DeviceDType dtype, const void* q, const void* k, const void* v,
                          const float* lse, const void* dout, const float* delta, void* dq,
                          void* dk, void* dv, const AttentionToken* tokens, int token_count,
                          AttentionShape shape, int blocks_per_query, float* dq_atomic_scratch,
                          CUstream_st* stream);
void launch_backward_mma_sync(DeviceDType dtype, const void* q, const void* k, const void* v,
                              const float* lse, const void* dout, const float* delta, void* dq,
                              void* dk, void* dv, const AttentionBackwardTiles& tiles,
                              AttentionShape shape, CUstream_st* stream);

// attention_backward_wgmma.cu (sm_90 only): the wgmma dq and dk/dv kernels, in tiles of
// attention_backward_tile_rows(AttentionBackwardKernel::wgmma, shape.dim) rows.
void launch_backward_wgmma(DeviceDType dtype, const void* q, const void* k, const void* v,
                           const float* lse, const void* dout, const float* delta, void* dq,
                           void* dk, void* dv, const AttentionBackwardTiles& tiles,
                           AttentionShape shape, CUstream_st* stream);

}  // namespace bitcheck::cuda
