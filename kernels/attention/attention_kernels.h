// The attention kernels' interface (plain C++ header): KV-cache write, fixed-order causal GQA
// forward (tensor-core kernels for bf16/fp16, SIMT for fp32 and the controls) and backward
// (tensor-core and SIMT, plus the atomicAdd-dq control), launch paths, tiles and work orders.
// attention_plan.cu defines it and picks the kernels; they are in one file per family:
// attention_forward_ws.cu, attention_forward_wgmma_synchronous.cu, attention_forward_mma_simt.cu,
// attention_decode.cu, attention_backward_wgmma.cu and attention_backward_mma_simt.cu.
//
// Tensors are row-major by slot: q, o, do, dq [slots, H, D]; k, v, dk, dv [slots, KVH, D];
// lse and delta [slots, H] fp32. The KV cache is [tokens, KVH, D] in the element dtype, addressed
// by a token's cache row = its sequence's cache base + position.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/device_dtype.h"
#include "common/runtime.h"
#include "core/paths.h"

struct CUstream_st;  // cudaStream_t without CUDA headers; nullptr is the default stream.

namespace bitcheck::cuda {

struct AttentionShape {
  int heads;
  int kv_heads;
  int dim;
  float scale;  // softmax scale, 1/sqrt(dim)
};

// The launch paths the launchers record (core/paths.h), for the impl `kind` (0 fixed-order,
// 1 the split-KV control, 2 the KV-block control, 3 the atomic-dq control).
std::vector<PathDecl> attention_paths(int kind);
// The sequence count from which a decode step packs a KV group's heads into one CTA (the wgmma
// forwards' "...decode.packed-heads"), or 0 when the group size never packs. At head dim 128 this
// counts sequences within one chunk (attention_chunk_keys); longer ones pack sooner (a CTA per
// chunk).
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

// Keys per chunk: the split-KV points of the head-dim-128 forward (512 before the lazy rescale
// came: docs/attention.md).
constexpr int attention_chunk_keys = 2048;

// Chunks of attention_chunk_keys a row at `last_position` reduces (chunk c: keys [2048c, 2048c +
// 2048)).
inline std::int64_t attention_forward_chunks(int last_position) {
  return last_position / attention_chunk_keys + 1;
}

// Whether sm_90 runs the warp-specialized forward at this head dim (128); head dim 64 runs the
// synchronous wgmma kernel, measured faster there (docs/attention.md).
inline bool attention_warp_specialized_dim(int dim) {
  return dim == 128;
}

// The tensor-core forward kernels (bf16/fp16, head dim 64 or 128).
enum class AttentionForwardKernel {
  // The device's: on sm_90 at head dim 128 the warp-specialized wgmma kernels
  // (attention_forward_ws.cu: a TMA producer warp; prefill on two consumer warpgroups in
  // ping-pong, decode-like launches on one, split at 2048-key chunks), at head dim 64 the
  // synchronous one (measured faster there); elsewhere mma.sync.
  automatic,
  mma_sync,           // forward_mma_kernel on any device ("forward.mma-sync")
  wgmma_synchronous,  // the earlier sm_90 kernel: cp.async loads, synchronous wgmma, no chunks
  // Test only: the warp-specialized kernels without chunks, which give wgmma_synchronous's bits.
  warp_specialized_unchunked,
};

// How the two consumer warpgroups of a prefill CTA issue their products: in turns (ping-pong: one
// warpgroup's softmax overlaps the other's wgmmas) or each as soon as its operands are there. A
// scheduling choice: both give the same bits. `automatic` is ping-pong, measured faster
// (BITCHECK_ATTENTION_SCHEDULE=pingpong|cooperative overrides it, for benchmarks).
// l2_sections: ping-pong, with the work items in sections of one (sequence, KV head) pair each
// (attention_prefill_order with a budget of one byte), the order of batches with more K/V than
// the L2 budget, forced on any batch (forward.wgmma.prefill.l2-sections).
// decode_one_per_sm / decode_two_per_sm: a decode launch's CTAs one per SM on 4 stages, or
// two per SM on 2 each, whatever its size; automatic takes one per SM where the launch has no more
// CTAs than SMs (BITCHECK_ATTENTION_DECODE_CTAS=one-per-sm|two-per-sm overrides it, for
// benchmarks). Scheduling too: the same bits.
enum class AttentionSchedule {
  automatic,
  pingpong,
  cooperative,
  l2_sections,
  decode_one_per_sm,
  decode_two_per_sm
};

// One forward launch over `tiles` (host copies; tiles of one segment, up to
// attention_mma_tile_queries queries each, longest first for prefill), planned once and run any
// number of times: it uploads the tiles, picks the kernel and launch shape (a scheduling choice:
// no bit depends on it) and, for a split decode, its work items, merge tasks and scratch. The KV
// cache has cache_rows rows of [kv_heads, dim] (the TMA loads are bounded by it).
class AttentionForwardLaunch {
 public:
  AttentionForwardLaunch(DeviceDType dtype, AttentionShape shape,
                         const std::vector<AttentionTile>& tiles, std::int64_t cache_rows,
                         AttentionForwardKernel kernel = AttentionForwardKernel::automatic,
                         AttentionSchedule schedule = AttentionSchedule::automatic);
  ~AttentionForwardLaunch();
  AttentionForwardLaunch(const AttentionForwardLaunch&) = delete;
  AttentionForwardLaunch& operator=(const AttentionForwardLaunch&) = delete;

  // o and lse of every query of every tile; records path(). Runs of one launch must not overlap
  // (a prefill's persistent CTAs share one work counter per launch): one stream, or synchronized.
  void run(const void* q, const void* k_cache, const void* v_cache, void* o, float* lse,
           CUstream_st* stream = nullptr) const;
  // The launch path (bitcheck list --paths): forward.wgmma.prefill, forward.wgmma.decode[.packed-
  // heads][.split-kv], forward.mma-sync, ...
  const std::string& path() const { return path_; }
  int splits() const { return splits_; }  // the most chunks a decode tile is split into
  // CTAs per SM of a decode launch (1 on 4 stages, 2 on 2 each), or 0 for other launches;
  // recorded as forward.wgmma.decode-ctas.one-per-sm or .two-per-sm.
  int ctas_per_sm() const { return ctas_per_sm_; }
  // Keys per chunk of the launch's arithmetic: attention_chunk_keys, or 0 (no chunks).
  int chunk_keys() const { return chunked_ ? attention_chunk_keys : 0; }

 private:
  DeviceDType dtype_;
  AttentionShape shape_;
  std::int64_t cache_rows_;
  std::int64_t query_rows_ = 0;  // slots of q (and o) the tiles reach
  AttentionForwardKernel kernel_ = AttentionForwardKernel::automatic;
  int tile_count_ = 0;
  int longest_tile_ = 0;
  bool decode_ = false;
  int ctas_per_sm_ = 0;
  int splits_ = 1;
  int pack_ = 1;
  bool pingpong_ = false;
  bool chunked_ = false;
  int item_count_ = 0;
  int merge_task_count_ = 0;
  DeviceBuffer tiles_, items_, merge_tasks_, partials_;
  DeviceBuffer next_item_;  // prefill: the work counter of the persistent CTAs
  DeviceBuffer order_;      // prefill: the order CTAs take work items (attention_prefill_order)
  std::string path_;
};

// The earlier kernels behind AttentionForwardKernel::mma_sync and wgmma_synchronous, over tiles
// in device memory: on an sm_90 device wgmma (attention_forward_uses_wgmma), elsewhere or with
// force_mma_sync mma.sync. longest_tile (the most queries in any tile) picks the wgmma launch
// shape for decode-like launches. No result depends on either.
bool attention_forward_uses_wgmma();  // for the current device
                                      // (BITCHECK_ATTENTION_FORWARD=mma-sync: false)
void attention_forward_mma(DeviceDType dtype, const void* q, const void* k_cache,
                           const void* v_cache, void* o, float* lse, const AttentionTile* tiles,
                           int tile_count, std::int64_t cache_rows, AttentionShape shape,
                           CUstream_st* stream, bool force_mma_sync = false,
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
// Rows of the paired tiles: the sm_90 backward at head dim 128 gives a CTA two warpgroups, each
// owning one 64-row tile of a 128-row pair that starts at a multiple of 128, and streams each
// block of the other operand once for both.
constexpr int attention_backward_pair_tile = 2 * attention_mma_backward_tile;

// The tiles of a tensor-core backward over whole sequences (sequence s: lengths[s] tokens from
// slot first_slots[s]), `rows` rows each (attention_mma_backward_tile or
// attention_backward_pair_tile), starting at multiples of `rows`, in two orders: queries
// longest-running first (start descending: a query tile's work grows with its position) and keys
// likewise (sequence_length - start descending). The orders change no result.
struct AttentionBackwardTileLists {
  std::vector<AttentionBackwardTile> queries, keys;
};
AttentionBackwardTileLists attention_backward_tiles(const std::vector<int>& first_slots,
                                                    const std::vector<int>& lengths, int rows);

// The order in which persistent prefill CTAs take their work items, each (tile index, head) coded
// as tile * heads + head. Items that read the same K/V run close together, so that a block, once
// in L2, serves every CTA that reads it: the (sequence, KV head) pairs (a sequence: the tiles of
// one cache_base; a pair's bytes: the sequence's last position + 1 rows of `kv_row_bytes`, K and V
// of one head) form sections of consecutive pairs whose bytes stay within `budget_bytes` (at
// least one pair each). Sequences come longest tile first; within a section the tiles come
// longest first, each with its heads of the section's KV heads in order. budget_bytes <= 0 gives
// one section: tiles longest first, each with all its heads. The order changes no result.
std::vector<int> attention_prefill_order(const std::vector<AttentionTile>& tiles, int heads,
                                         int kv_heads, std::int64_t kv_row_bytes,
                                         std::int64_t budget_bytes);

// The L2 budget of a section of work items: 16 MiB, or BITCHECK_ATTENTION_L2_MIB MiB (0: one
// section, the longest-first order alone).
std::int64_t attention_l2_budget();

// The tiles of one backward launch in device memory, `rows` rows each: the queries' order and the
// keys' (attention_backward_tiles), count tiles in each.
struct AttentionBackwardTiles {
  const AttentionBackwardTile* queries;
  const AttentionBackwardTile* keys;
  int count;
  int rows;
};

// Backward over whole sequences (o, lse from the forward): delta = rowsum(do * o), then dq per
// query over keys in order and dk, dv per key over queries in order (heads of a group in order).
// dq_atomic_scratch != nullptr selects the control: dq from per-64-key-block partials added with
// atomicAdd into that fp32 scratch (tokens * heads * dim floats), then rounded.
void attention_backward(DeviceDType dtype, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* dout, float* delta, void* dq,
                        void* dk, void* dv, const AttentionToken* tokens, int token_count,
                        int max_position, AttentionShape shape, float* dq_atomic_scratch,
                        CUstream_st* stream);

// The tensor-core backward kernels (bf16/fp16, head dim 64 or 128).
enum class AttentionBackwardKernel {
  automatic,  // the device's: wgmma on sm_90 (BITCHECK_ATTENTION_BACKWARD=mma-sync: mma.sync)
  mma_sync,   // mma.sync m16n8k16 on any device ("backward.mma")
  wgmma,      // sm_90 only: warpgroup MMAs, a warpgroup per 64-row tile ("backward.wgmma")
};
// The kernel `automatic` runs on the current device.
AttentionBackwardKernel attention_backward_device_kernel();
// The rows of the tiles `kernel` takes at head dim `dim`: attention_backward_pair_tile for the
// sm_90 kernels at head dim 128, else attention_mma_backward_tile.
int attention_backward_tile_rows(AttentionBackwardKernel kernel, int dim);

// Tensor-core backward (bf16/fp16, head dim 64 or 128) of the same sums as attention_backward's
// fixed-order path: delta as there, dq over key blocks of attention_mma_kv_block from position 0
// upward, dk and dv over the heads of the group in order and, per head, query blocks from the
// key's own block upward. Both lists of `tiles` cover every token, in tiles of
// attention_backward_tile_rows(kernel, shape.dim) rows (other sizes: std::invalid_argument).
// Agrees with attention_backward to rounding, not bitwise. Records "backward.wgmma.paired" (sm_90,
// head dim 128), "backward.wgmma" (sm_90, head dim 64) or "backward.mma".
void attention_backward_mma(DeviceDType dtype, const void* q, const void* k, const void* v,
                            const void* o, const float* lse, const void* dout, float* delta,
                            void* dq, void* dk, void* dv, const AttentionToken* tokens,
                            int token_count, const AttentionBackwardTiles& tiles,
                            AttentionShape shape, CUstream_st* stream,
                            AttentionBackwardKernel kernel = AttentionBackwardKernel::automatic);

// Test support for the forward's epilogue division (attention_device::division_quotient, o = acc /
// l): on `pairs` pseudo-random pairs (from `seed`) with l in [1/2, 2^24) and |acc| in [2^-90,
// 2^100) or +-0, how many give other bits than __fdiv_rn. With `naive`, acc * __frcp_rn(l) stands
// in for it (which differs now and then: the comparison can fail).
std::int64_t attention_division_mismatches(std::int64_t pairs, std::uint64_t seed, bool naive);

}  // namespace bitcheck::cuda
