// attention launchers: KV-cache write, fixed-order causal GQA forward (tensor-core flash kernel
// for bf16/fp16, a SIMT kernel for fp32 and the controls), split-KV combine, and the fixed-order
// SIMT backward (dq per query, dk/dv per key) plus the atomicAdd-dq control. Plain C++ header.
//
// Tensors are row-major by slot: q, o, do, dq [slots, H, D]; k, v, dk, dv [slots, KVH, D];
// lse and delta [slots, H] fp32. The KV cache is [tokens, KVH, D] in the element dtype, addressed
// by a token's cache row = its sequence's cache base + position.
#pragma once
#include <cstdint>
#include <vector>

#include "bitcheck/paths.h"
#include "common/device_dtype.h"

struct CUstream_st;  // cudaStream_t without CUDA headers; nullptr is the default stream.

namespace bitcheck::cuda {

struct AttentionShape {
  int heads;
  int kv_heads;
  int dim;
  float scale;  // softmax scale, 1/sqrt(dim)
};

// The launch paths the launchers record (bitcheck/paths.h), for the impl `kind` (0 fixed-order,
// 1 the split-KV control, 2 the KV-block control, 3 the atomic-dq control).
std::vector<PathDecl> attention_paths(int kind);
// The sequence count from which a decode step packs a KV group's heads into one CTA (the wgmma
// forward's "forward.wgmma.decode.packed-heads"), or 0 when the group size never packs.
std::int64_t attention_packed_heads_sequences(AttentionShape shape);

// One query (or key) token. Forward: keys of positions 0..position at rows cache_base + j of the
// cache. Backward: whole sequences, keys and queries at slots cache_base + j of the inputs.
struct AttentionToken {
  int slot;
  int position;
  int cache_base;
  int sequence_length;  // backward only: tokens of the sequence
};

// Up to attention_mma_tile_queries consecutive query tokens of one segment, for the tensor-core
// forward kernel (one CTA per tile and head). The tile size and the tiles' order change no result.
struct AttentionTile {
  int first_slot;
  int count;
  int start_position;
  int cache_base;
};

constexpr int attention_mma_tile_queries = 128;  // 8 warps of 16 query rows
constexpr int attention_mma_kv_block = 64;  // keys per softmax block: fixes the reduction order

// Copies k, v rows of every real slot into the cache: cache_rows[slot] (-1: pad slot, skipped).
void attention_write_cache(DeviceDType dtype, const void* k, const void* v, void* k_cache,
                           void* v_cache, const int* cache_rows, int slots, int row_width,
                           CUstream_st* stream);

// Tensor-core forward (bf16/fp16, dim 64 or 128): o and lse of every query of every tile. On an
// sm_90 device the products run on wgmma (attention_forward_uses_wgmma), elsewhere on mma.sync;
// the choice depends on the device only.
// force_mma_sync runs the mma.sync kernel on any device (the GPU tests compare the two paths).
// longest_tile (the most queries in any tile) lets the wgmma launcher pick its launch shape for
// decode-like launches; the default treats the launch as prefill. No result depends on either.
bool attention_forward_uses_wgmma();  // for the current device
                                      // (BITCHECK_ATTENTION_FORWARD=mma-sync: false)
void attention_forward_mma(DeviceDType dtype, const void* q, const void* k_cache,
                           const void* v_cache, void* o, float* lse, const AttentionTile* tiles,
                           int tile_count, AttentionShape shape, CUstream_st* stream,
                           bool force_mma_sync = false,
                           int longest_tile = attention_mma_tile_queries);

// SIMT forward (any dtype, dim <= 128, kv_block a multiple of 32 up to 128): keys in blocks of
// kv_block from position 0; with splits > 1 each query's blocks are cut into `splits` contiguous
// ranges whose partials (scratch: tokens * heads * splits * (dim + 2) floats) are then combined.
void attention_forward_simt(DeviceDType dtype, const void* q, const void* k_cache,
                            const void* v_cache, void* o, float* lse, const AttentionToken* tokens,
                            int token_count, AttentionShape shape, int kv_block, int splits,
                            float* scratch, CUstream_st* stream);

// Up to attention_mma_backward_tile consecutive rows of one whole sequence, for the tensor-core
// backward: queries of the dq kernel or keys of the dk/dv kernel (one CTA per tile and head, or
// kv head). start_position is a multiple of the tile size, so a row's tile neighbours are fixed by
// its own sequence; the tiles' order changes no result.
struct AttentionBackwardTile {
  int first_slot;       // slot of the tile's first row
  int count;            // rows in the tile
  int start_position;   // position of the first row
  int sequence_slot;    // slot of the sequence's position 0
  int sequence_length;  // tokens of the sequence
};

constexpr int attention_mma_backward_tile =
    64;  // 4 warps of 16 rows; equals attention_mma_kv_block

// Backward over whole sequences (o, lse from the forward): delta = rowsum(do * o), then dq per
// query over keys in order and dk, dv per key over queries in order (heads of a group in order).
// dq_atomic_scratch != nullptr selects the control: dq from per-64-key-block partials added with
// atomicAdd into that fp32 scratch (tokens * heads * dim floats), then rounded.
void attention_backward(DeviceDType dtype, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* dout, float* delta, void* dq,
                        void* dk, void* dv, const AttentionToken* tokens, int token_count,
                        int max_position, AttentionShape shape, float* dq_atomic_scratch,
                        CUstream_st* stream);

// Tensor-core backward (bf16/fp16, head dim 64 or 128) of the same sums as attention_backward's
// fixed-order path, on mma.sync: delta as there, dq over key blocks of attention_mma_kv_block from
// position 0 upward, dk and dv over the heads of the group in order and, per head, query blocks
// from the key's own block upward. query_tiles and key_tiles both cover every token (tile_count
// each, usually in different orders). Agrees with attention_backward to rounding, not bitwise.
void attention_backward_mma(DeviceDType dtype, const void* q, const void* k, const void* v,
                            const void* o, const float* lse, const void* dout, float* delta,
                            void* dq, void* dk, void* dv, const AttentionToken* tokens,
                            int token_count, const AttentionBackwardTile* query_tiles,
                            const AttentionBackwardTile* key_tiles, int tile_count,
                            AttentionShape shape, CUstream_st* stream);

}  // namespace bitcheck::cuda
