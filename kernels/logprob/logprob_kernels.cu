// logprob kernels beside their launchers: the fixed-order kernel (one read of a row for its
// log-sum-exp; the backward writes dlogits from the same read) and the split-by-rows control.
//
// Why the fixed-order reduction is independent of batch, position and padding: a row is read as
// groups of 8 entries counted from the row start, and logprob_fixed_plan cuts it into contiguous
// runs of groups from V, the dtype and the pass alone (and the device's cluster support): one run
// in the forward; in the backward as many runs as keep each within 64 KiB of shared memory, the
// blocks of one row forming a thread-block cluster. The block of 256 threads that owns a run folds
// it: thread t takes groups t, t + 256, t + 512, ... of the run in ascending order (4 groups, 2 for
// fp32, are loaded before any is folded; the order of folding is unchanged) into an online (max,
// sum of exp) pair, each group as its max first and then its 8 terms in entry order. The 32 lanes
// of a warp are combined by a fixed xor butterfly, the 8 warps by thread 0 in warp order, and the
// runs of a row in run order, by every block of the cluster alike, so all of them get the same
// bits. A group is loaded with 16-byte accesses when the row start is 16-byte aligned and entry by
// entry otherwise; both give the same values to the same fold, so the load path never changes a
// bit. Every operation is explicitly rounded (__fmul_rn & co.), so no FMA contraction can differ
// between inlined copies. The batch decides only how many rows (grid.y) exist, never how a row is
// split or combined, and pad slots are never read (rows come from an index list).
//
// On sm_90 the forward streams aligned rows through shared memory with bulk copies (see
// streamed_forward_kernel); the fold is the same.
//
// Memory traffic per logit: the forward reads it once. The backward reads it once, keeping it in
// shared memory, and writes its dlogit once; a row that does not fit (over 8 x 64 KiB, or over
// 64 KiB where clusters are unavailable) is read a second time instead.
//
// The control (LogprobSplit::piece > 0) cuts each row into pieces whose size the adapter derives
// from the batch, reduces each piece with the same block fold into a workspace partial, merges a
// row's pieces with one thread (last to first), and reads the logits again for dlogits: a
// batch-dependent split by design.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/async_copy.cuh"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/vector_io.cuh"
#include "core/paths.h"
#include "logprob_kernels.h"

namespace bitcheck::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 8;  // entries per group: one 16-byte access of bf16/fp16, two of fp32
constexpr float kLog2e = 1.44269504088896340736f;
// Shared memory one backward block keeps its run in: three such blocks fit on an SM.
constexpr std::int64_t kStageBytes = 64 * 1024;
constexpr std::int64_t kMaxClusterBlocks = 8;  // the portable cluster size

// Groups each thread loads before folding any: 64 bytes in flight per thread.
template <typename T>
constexpr int kUnroll = sizeof(T) == 4 ? 2 : 4;

cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

std::int64_t element_bytes(DeviceDType dtype) {
  return dtype == DeviceDType::fp32 ? 4 : 2;
}

// 8 consecutive entries of a row: 16 bytes of bf16/fp16, 32 of fp32.
template <typename T>
struct alignas(16) Group {
  T value[kGroup];
};

// Group `group` of a row of `vocab` entries, entries past the row end read as -inf. `vector`: the
// row start is 16-byte aligned, so whole groups are read with 16-byte accesses.
template <typename T>
__device__ __forceinline__ Group<T> load_group(const T* row, std::int64_t group, std::int64_t vocab,
                                               bool vector) {
  const std::int64_t first = group * kGroup;
  Group<T> g;
  if (vector && first + kGroup <= vocab) {
    const uint4* source = reinterpret_cast<const uint4*>(row + first);
    uint4* target = reinterpret_cast<uint4*>(g.value);
    target[0] = source[0];
    if constexpr (sizeof(T) == 4) target[1] = source[1];
    return g;
  }
  for (int j = 0; j < kGroup; ++j) {
    g.value[j] = first + j < vocab ? row[first + j] : from_float<T>(-INFINITY);
  }
  return g;
}

// Writes the entries of group `group` that lie inside the row.
template <typename T>
__device__ __forceinline__ void store_group(T* row, std::int64_t group, std::int64_t vocab,
                                            bool vector, const Group<T>& g) {
  const std::int64_t first = group * kGroup;
  if (vector && first + kGroup <= vocab) {
    uint4* target = reinterpret_cast<uint4*>(row + first);
    const uint4* source = reinterpret_cast<const uint4*>(g.value);
    target[0] = source[0];
    if constexpr (sizeof(T) == 4) target[1] = source[1];
    return;
  }
  for (int j = 0; j < kGroup && first + j < vocab; ++j) row[first + j] = g.value[j];
}

struct Partial {
  float max;  // the largest entry folded so far (-inf when none)
  float sum;  // the sum of exp(entry - max)
};

__device__ __forceinline__ float times_log2e(float value) {
  return __fmul_rn(value, kLog2e);
}

// 2^x by the hardware approximation (ex2.approx.ftz.f32, exp2f's core without its fix-up for
// subnormal results, which costs three more instructions per entry). Deterministic. A flushed
// result is below 2^-126: it cannot change a sum that holds the term of its maximum (~1), as every
// partial here does, and in dlogits it only turns a softmax entry below 1.2e-38 into 0.
__device__ __forceinline__ float exp2_flush(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// exp(a - b) is evaluated as 2^(a * log2(e) - b * log2(e)) throughout: one FMA (or multiply) and
// one exp2 per term.
__device__ __forceinline__ Partial merge(Partial a, Partial b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, __fadd_rn(a.sum, b.sum)};
  const float scaled_max = times_log2e(max);
  return {max, __fadd_rn(__fmul_rn(a.sum, exp2_flush(__fsub_rn(times_log2e(a.max), scaled_max))),
                         __fmul_rn(b.sum, exp2_flush(__fsub_rn(times_log2e(b.max), scaled_max))))};
}

// Folds one group into `own`: the group's max first (one rescale at most), then its 8 terms in
// entry order. Until a finite maximum is seen every entry is -inf (or NaN); offset 0 then keeps
// -inf - (-inf) from turning the zero terms into NaN.
template <typename T>
__device__ __forceinline__ void fold_group(const Group<T>& g, Partial& own) {
  float x[kGroup];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) x[j] = to_float(g.value[j]);
  float group_max = x[0];
#pragma unroll
  for (int j = 1; j < kGroup; ++j) group_max = fmaxf(group_max, x[j]);
  if (group_max > own.max) {
    own.sum =
        __fmul_rn(own.sum, exp2_flush(__fsub_rn(times_log2e(own.max), times_log2e(group_max))));
    own.max = group_max;
  }
  const float offset = own.max == -INFINITY ? 0.0f : times_log2e(own.max);
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    own.sum = __fadd_rn(own.sum, exp2_flush(__fmaf_rn(x[j], kLog2e, -offset)));
  }
}

// Folds groups [begin, end) of `row`: thread t takes begin + t, begin + t + kThreads, ... in
// ascending order, loading kUnroll of them before folding. With `stage`, each group is also kept
// at stage[group - begin], where only the same thread reads it again.
template <typename T>
__device__ __forceinline__ Partial fold_run(const T* row, std::int64_t vocab, std::int64_t begin,
                                            std::int64_t end, bool vector, Group<T>* stage) {
  constexpr int kUnrollT = kUnroll<T>;
  Partial own = {-INFINITY, 0.0f};
  for (std::int64_t first = begin + threadIdx.x; first < end; first += kThreads * kUnrollT) {
    Group<T> groups[kUnrollT];
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const std::int64_t group = first + u * kThreads;
      if (group < end) groups[u] = load_group(row, group, vocab, vector);
    }
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const std::int64_t group = first + u * kThreads;
      if (group >= end) continue;
      if (stage) stage[group - begin] = groups[u];
      fold_group(groups[u], own);
    }
  }
  return own;
}

// Combines the block's partials (the lanes of a warp by a fixed xor butterfly, lower lane first;
// the warps by thread 0 in warp order) into `block_total`, which every thread then returns.
__device__ __forceinline__ Partial block_reduce(Partial own, Partial& block_total) {
  __shared__ Partial warp_partials[kWarps];
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const Partial other = {__shfl_xor_sync(0xffffffffu, own.max, offset),
                           __shfl_xor_sync(0xffffffffu, own.sum, offset)};
    own = (lane & offset) ? merge(other, own) : merge(own, other);
  }
  if (lane == 0) warp_partials[threadIdx.x / 32] = own;
  __syncthreads();
  if (threadIdx.x == 0) {
    Partial total = warp_partials[0];
    for (int w = 1; w < kWarps; ++w) total = merge(total, warp_partials[w]);
    block_total = total;
  }
  __syncthreads();
  return block_total;
}

// The row's total from the partials of its runs, one per block of the cluster (which spans
// grid.x, so block rank r owns run r), merged in run order by every block alike.
__device__ __forceinline__ Partial merge_cluster_runs(Partial& block_total) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ Partial row_total;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's block_total is written
  if (threadIdx.x == 0) {
    Partial total = *cluster.map_shared_rank(&block_total, 0u);
    for (unsigned rank = 1; rank < gridDim.x; ++rank) {
      total = merge(total, *cluster.map_shared_rank(&block_total, rank));
    }
    row_total = total;
  }
  cluster.sync();  // no block reads another's shared memory past here; row_total is visible
  return row_total;
#else
  __trap();  // the launcher uses clusters only where this build has sm_90 code
  return block_total;
#endif
}

__device__ __forceinline__ void record_error(std::uint64_t* error_record, std::int64_t slot,
                                             std::int32_t target) {
  *error_record = (static_cast<std::uint64_t>(slot) << 32) | static_cast<std::uint32_t>(target);
}

// dlogits of one group: upstream * (onehot - softmax), softmax = 2^(x log2(e) - lse log2(e)).
template <typename T>
__device__ __forceinline__ Group<T> dlogits_group(const Group<T>& g, std::int64_t group,
                                                  std::int32_t target, float upstream,
                                                  float scaled_lse) {
  const std::int64_t target_offset = target - group * kGroup;
  const int target_lane =
      target_offset >= 0 && target_offset < kGroup ? static_cast<int>(target_offset) : -1;
  Group<T> d;
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float p = exp2_flush(__fmaf_rn(to_float(g.value[j]), kLog2e, -scaled_lse));
    const float onehot = j == target_lane ? 1.0f : 0.0f;
    d.value[j] = from_float<T>(__fmul_rn(upstream, __fsub_rn(onehot, p)));
  }
  return d;
}

// Writes dlogits of groups [begin, end), thread t taking the same groups as in fold_run: from
// `stage` where the run was kept, else read from `row` again.
template <typename T>
__device__ __forceinline__ void write_dlogits_run(const T* row, T* out, std::int64_t vocab,
                                                  std::int64_t begin, std::int64_t end, bool vector,
                                                  const Group<T>* stage, std::int32_t target,
                                                  float upstream, float lse) {
  constexpr int kUnrollT = kUnroll<T>;
  const float scaled_lse = times_log2e(lse);
  for (std::int64_t first = begin + threadIdx.x; first < end; first += kThreads * kUnrollT) {
    Group<T> groups[kUnrollT];
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const std::int64_t group = first + u * kThreads;
      if (group >= end) continue;
      groups[u] = stage ? stage[group - begin] : load_group(row, group, vocab, vector);
    }
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const std::int64_t group = first + u * kThreads;
      if (group >= end) continue;
      store_group(out, group, vocab, vector,
                  dlogits_group(groups[u], group, target, upstream, scaled_lse));
    }
  }
}

struct FixedOrderArgs {
  const void* logits;
  const std::int32_t* targets;
  const float* dlogprob;  // backward
  const std::int32_t* in_rows;
  const std::int32_t* out_rows;
  std::int64_t vocab;
  std::int64_t run_groups;  // groups per block (the whole row in the forward)
  bool vector;              // logits rows (and dlogits rows) start 16-byte aligned
  bool staged;              // backward: the run stays in shared memory between the two passes
  float* logprob;           // forward output
  void* dlogits;            // backward output
  std::uint64_t* error_record;
};

// grid = (blocks per row, rows); block (b, r) owns run b of row r. Forward: logprob of the row.
// Backward: the row's log-sum-exp, then dlogits of the run. The target is checked only after the
// fold, so that the row's loads wait for nothing but the row index; a row whose target lies outside
// [0, vocab) is read, but nothing is read at its target or written for it.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads) fixed_order_kernel(FixedOrderArgs a) {
  extern __shared__ uint4 stage_words[];
  __shared__ Partial block_total;
  const std::int64_t slot = a.in_rows[blockIdx.y];
  const std::int32_t target = a.targets[slot];
  const std::int64_t out_row = a.out_rows[blockIdx.y];
  const float upstream = kBackward ? a.dlogprob[slot] : 0.0f;
  const T* row = static_cast<const T*>(a.logits) + slot * a.vocab;
  const std::int64_t row_groups = (a.vocab + kGroup - 1) / kGroup;
  const std::int64_t run_begin = blockIdx.x * a.run_groups;
  const std::int64_t begin = run_begin < row_groups ? run_begin : row_groups;
  const std::int64_t end = begin + a.run_groups < row_groups ? begin + a.run_groups : row_groups;
  Group<T>* stage = kBackward && a.staged ? reinterpret_cast<Group<T>*>(stage_words) : nullptr;
  const Partial own = fold_run(row, a.vocab, begin, end, a.vector, stage);
  const bool valid_target = target >= 0 && target < a.vocab;
  // Forward: the target's logit, loaded while the block reduces.
  const float target_logit =
      !kBackward && threadIdx.x == 0 && valid_target ? to_float(row[target]) : 0.0f;
  Partial total = block_reduce(own, block_total);
  if (!valid_target) {  // alike for every block of the row, i.e. of the cluster
    if (threadIdx.x == 0 && blockIdx.x == 0) record_error(a.error_record, slot, target);
    return;
  }
  if constexpr (kBackward) {
    if (gridDim.x > 1) total = merge_cluster_runs(block_total);
  }
  const float lse = __fadd_rn(total.max, logf(total.sum));
  if constexpr (!kBackward) {
    if (threadIdx.x == 0) a.logprob[out_row] = __fsub_rn(target_logit, lse);
  } else {
    T* out = static_cast<T*>(a.dlogits) + out_row * a.vocab;
    write_dlogits_run(row, out, a.vocab, begin, end, a.vector, stage, target, upstream, lse);
  }
}

// Forward of rows that start 16-byte aligned and hold whole groups, on sm_90: the row streams
// through shared memory in chunks of one fold step (kThreads x kStreamUnroll groups), copied by
// the bulk-copy engine with kStreamStages chunks in flight per block whatever its warps are doing.
// (Loading into registers, a block had bytes in flight only while its warps waited; with the
// folds' exp2 work in between, that left the memory system idle for part of each step.) Thread t
// folds groups t, t + kThreads, t + 2 kThreads, ... in ascending order, exactly as fold_run does:
// the same fold, the same bits; BITCHECK_LOGPROB_FORWARD=registers runs fold_run instead.
// One group from shared memory in 16-byte loads (indexing the struct there directly compiles to
// one 2-byte load per entry).
template <typename T>
__device__ __forceinline__ Group<T> load_shared_group(const Group<T>* source) {
  Group<T> g;
  const uint4* words = reinterpret_cast<const uint4*>(source);
  uint4* target = reinterpret_cast<uint4*>(g.value);
  target[0] = words[0];
  if constexpr (sizeof(T) == 4) target[1] = words[1];
  return g;
}

constexpr int kStreamStages = 4;
template <typename T>
constexpr int kStreamUnroll = sizeof(T) == 4 ? 1 : 2;  // 8 KiB chunks

template <typename T>
__global__ void __launch_bounds__(kThreads) streamed_forward_kernel(FixedOrderArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kChunkGroups = kThreads * kStreamUnroll<T>;
  extern __shared__ uint4 stream_words[];
  Group<T>* chunks = reinterpret_cast<Group<T>*>(stream_words);
  __shared__ std::uint64_t full[kStreamStages];
  __shared__ Partial block_total;
  const std::int64_t slot = a.in_rows[blockIdx.y];
  const std::int32_t target = a.targets[slot];
  const std::int64_t out_row = a.out_rows[blockIdx.y];
  const T* row = static_cast<const T*>(a.logits) + slot * a.vocab;
  const std::int64_t groups = a.vocab / kGroup;  // whole groups: the launcher checks
  const std::int64_t count = (groups + kChunkGroups - 1) / kChunkGroups;
  auto issue = [&](std::int64_t c) {
    const std::int64_t first = c * kChunkGroups;
    const std::int64_t n = groups - first < kChunkGroups ? groups - first : kChunkGroups;
    const auto bytes = static_cast<std::uint32_t>(n * sizeof(Group<T>));
    std::uint64_t* bar = &full[c % kStreamStages];
    async_copy::mbar_expect_tx(bar, bytes);
    async_copy::bulk_load(chunks + (c % kStreamStages) * kChunkGroups, row + first * kGroup, bytes,
                          bar);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStreamStages; ++s) async_copy::mbar_init(&full[s], 1);
    async_copy::mbar_init_fence();
    for (std::int64_t c = 0; c < count && c < kStreamStages; ++c) issue(c);
  }
  __syncthreads();
  Partial own = {-INFINITY, 0.0f};
  for (std::int64_t c = 0; c < count; ++c) {
    const int stage = static_cast<int>(c % kStreamStages);
    async_copy::mbar_wait(&full[stage], static_cast<std::uint32_t>((c / kStreamStages) & 1));
    const std::int64_t first = c * kChunkGroups;
#pragma unroll
    for (int u = 0; u < kStreamUnroll<T>; ++u) {
      const int g = u * kThreads + static_cast<int>(threadIdx.x);
      if (first + g < groups) fold_group(load_shared_group(chunks + stage * kChunkGroups + g), own);
    }
    __syncthreads();  // every thread is done with this stage
    if (threadIdx.x == 0 && c + kStreamStages < count) {
      async_copy::fence_proxy_async_shared();
      issue(c + kStreamStages);
    }
  }
  const bool valid_target = target >= 0 && target < a.vocab;
  const float target_logit = threadIdx.x == 0 && valid_target ? to_float(row[target]) : 0.0f;
  const Partial total = block_reduce(own, block_total);
  if (!valid_target) {
    if (threadIdx.x == 0) record_error(a.error_record, slot, target);
    return;
  }
  const float lse = __fadd_rn(total.max, logf(total.sum));
  if (threadIdx.x == 0) a.logprob[out_row] = __fsub_rn(target_logit, lse);
#else
  __trap();  // launched only where this build has sm_90 code (streamed_forward_supported)
#endif
}

// Control, pass 1: grid = (pieces, rows); block (p, r) reduces piece p of row r into
// partials[r * pieces + p].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    piece_partials_kernel(const T* logits, const std::int32_t* in_rows, std::int64_t vocab,
                          std::int64_t piece_groups, bool vector, Partial* partials) {
  __shared__ Partial block_total;
  const std::int64_t slot = in_rows[blockIdx.y];
  const std::int64_t row_groups = (vocab + kGroup - 1) / kGroup;
  const std::int64_t begin = blockIdx.x * piece_groups;
  const std::int64_t end = begin + piece_groups < row_groups ? begin + piece_groups : row_groups;
  const Partial total = block_reduce(
      fold_run(logits + slot * vocab, vocab, begin, end, vector, static_cast<Group<T>*>(nullptr)),
      block_total);
  if (threadIdx.x == 0)
    partials[static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = total;
}

// Control, pass 2: one thread per row merges the row's pieces (last to first when reverse_merge)
// into its log-sum-exp; the forward also gathers the target.
template <typename T>
__global__ void merge_pieces_kernel(const T* logits, const std::int32_t* targets,
                                    const std::int32_t* in_rows, const std::int32_t* out_rows,
                                    std::int64_t rows, std::int64_t vocab, std::int64_t pieces,
                                    bool reverse_merge, const Partial* partials, float* lse,
                                    float* logprob, std::uint64_t* error_record) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const Partial* own = partials + r * pieces;
  Partial total = own[reverse_merge ? pieces - 1 : 0];
  for (std::int64_t k = 1; k < pieces; ++k)
    total = merge(total, own[reverse_merge ? pieces - 1 - k : k]);
  const float row_lse = __fadd_rn(total.max, logf(total.sum));
  lse[r] = row_lse;
  if (!logprob) return;
  const std::int64_t slot = in_rows[r];
  const std::int32_t target = targets[slot];
  if (target < 0 || target >= vocab) {
    record_error(error_record, slot, target);
    return;
  }
  logprob[out_rows[r]] = __fsub_rn(to_float(logits[slot * vocab + target]), row_lse);
}

// Control, pass 3 (backward): grid = (pieces, rows); dlogits of piece p of row r from its lse.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    piece_dlogits_kernel(const T* logits, const std::int32_t* targets, const float* dlogprob,
                         const std::int32_t* in_rows, const std::int32_t* out_rows,
                         std::int64_t vocab, std::int64_t piece_groups, bool vector,
                         const float* lse, T* dlogits, std::uint64_t* error_record) {
  const std::int64_t slot = in_rows[blockIdx.y];
  const std::int32_t target = targets[slot];
  if (target < 0 || target >= vocab) {
    if (threadIdx.x == 0 && blockIdx.x == 0) record_error(error_record, slot, target);
    return;
  }
  const std::int64_t row_groups = (vocab + kGroup - 1) / kGroup;
  const std::int64_t begin = blockIdx.x * piece_groups;
  const std::int64_t end = begin + piece_groups < row_groups ? begin + piece_groups : row_groups;
  T* out = dlogits + static_cast<std::int64_t>(out_rows[blockIdx.y]) * vocab;
  write_dlogits_run(logits + slot * vocab, out, vocab, begin, end, vector,
                    static_cast<const Group<T>*>(nullptr), target, dlogprob[slot], lse[blockIdx.y]);
}

// Whether the backward kernel of `dtype` may run as clusters here: the device launches clusters
// and the code it runs was compiled for sm_90 or later (not JIT-compiled from the sm_80 PTX).
bool clusters_supported(DeviceDType dtype) {
  int device = 0, cluster_launch = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  BITCHECK_CUDA_CALL(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
  if (!cluster_launch) return false;
  cudaFuncAttributes attributes{};
  switch (dtype) {
    case DeviceDType::bf16:
      BITCHECK_CUDA_CALL(
          cudaFuncGetAttributes(&attributes, fixed_order_kernel<__nv_bfloat16, true>));
      break;
    case DeviceDType::fp16:
      BITCHECK_CUDA_CALL(cudaFuncGetAttributes(&attributes, fixed_order_kernel<__half, true>));
      break;
    case DeviceDType::fp32:
      BITCHECK_CUDA_CALL(cudaFuncGetAttributes(&attributes, fixed_order_kernel<float, true>));
      break;
  }
  return attributes.ptxVersion >= 90;
}

void check_call(std::int64_t rows, std::int64_t vocab, const LogprobSplit& split) {
  if (rows < 0 || vocab < 1)
    throw std::invalid_argument("logprob: rows >= 0 and vocab >= 1 required");
  if (split.piece < 0 || split.piece % kGroup != 0)
    throw std::invalid_argument("logprob: piece must be 0 (fixed order) or a multiple of 8");
  if (rows > 65535) throw std::invalid_argument("logprob: at most 65535 rows per call");
}

template <typename T, bool kBackward>
void launch_fixed_order(const FixedOrderArgs& args, std::int64_t rows, const LogprobFixedPlan& plan,
                        cudaStream_t stream) {
  const auto kernel = fixed_order_kernel<T, kBackward>;
  const std::size_t shared =
      plan.staged ? static_cast<std::size_t>(plan.block_entries / kGroup) * sizeof(Group<T>) : 0;
  if (shared > 0) {  // past 48 KiB (static shared memory included) only with this opt-in
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shared)));
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(rows));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(plan.blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = plan.blocks > 1 ? 1 : 0;
  BITCHECK_CUDA_CALL(cudaLaunchKernelEx(&config, kernel, args));
}

// Whether the streamed forward runs here: an sm_90 device running code compiled for it (not the
// sm_80 PTX), unless BITCHECK_LOGPROB_FORWARD=registers asks for the register-loading kernel.
// The device query is made once per device and dtype.
template <typename T>
bool streamed_forward_supported() {
  const char* forced = std::getenv("BITCHECK_LOGPROB_FORWARD");
  if (forced && std::strcmp(forced, "registers") == 0) return false;
  static std::atomic<int> known[16] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  if (device >= 0 && device < 16 && known[device] != 0) return known[device] == 2;
  int major = 0;
  BITCHECK_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  bool supported = major >= 9;
  if (supported) {
    cudaFuncAttributes attributes{};
    BITCHECK_CUDA_CALL(cudaFuncGetAttributes(&attributes, streamed_forward_kernel<T>));
    supported = attributes.ptxVersion >= 90;
  }
  if (device >= 0 && device < 16) known[device] = supported ? 2 : 1;
  return supported;
}

template <typename T>
void launch_streamed_forward(const FixedOrderArgs& args, std::int64_t rows, cudaStream_t stream) {
  const std::size_t shared =
      static_cast<std::size_t>(kStreamStages) * kThreads * kStreamUnroll<T> * sizeof(Group<T>);
  streamed_forward_kernel<T>
      <<<dim3(1, static_cast<unsigned>(rows)), kThreads, shared, stream>>>(args);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

template <typename T>
void run_control(bool backward, const void* logits, const std::int32_t* targets,
                 const float* dlogprob, const std::int32_t* in_rows, const std::int32_t* out_rows,
                 std::int64_t rows, std::int64_t vocab, float* logprob, void* dlogits,
                 const LogprobSplit& split, void* workspace, std::uint64_t* error_record,
                 cudaStream_t s) {
  const std::int64_t pieces = (vocab + split.piece - 1) / split.piece;
  const std::int64_t piece_groups = split.piece / kGroup;
  const bool vector = aligned_16(logits) && aligned_16(dlogits) &&
                      (vocab * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  Partial* partials = static_cast<Partial*>(workspace);
  float* lse = reinterpret_cast<float*>(partials + rows * pieces);
  const T* typed_logits = static_cast<const T*>(logits);
  const dim3 grid(static_cast<unsigned>(pieces), static_cast<unsigned>(rows));
  piece_partials_kernel<T>
      <<<grid, kThreads, 0, s>>>(typed_logits, in_rows, vocab, piece_groups, vector, partials);
  BITCHECK_CUDA_LAUNCH_CHECK();
  merge_pieces_kernel<T><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, s>>>(
      typed_logits, targets, in_rows, out_rows, rows, vocab, pieces, split.reverse_merge, partials,
      lse, backward ? nullptr : logprob, error_record);
  BITCHECK_CUDA_LAUNCH_CHECK();
  if (!backward) return;
  piece_dlogits_kernel<T><<<grid, kThreads, 0, s>>>(typed_logits, targets, dlogprob, in_rows,
                                                    out_rows, vocab, piece_groups, vector, lse,
                                                    static_cast<T*>(dlogits), error_record);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

// One call of either pass: the fixed-order kernel, or the control's three steps.
template <typename T>
void run(bool backward, DeviceDType dtype, const void* logits, const std::int32_t* targets,
         const float* dlogprob, const std::int32_t* in_rows, const std::int32_t* out_rows,
         std::int64_t rows, std::int64_t vocab, float* logprob, void* dlogits,
         const LogprobSplit& split, void* workspace, std::uint64_t* error_record, cudaStream_t s) {
  if (split.piece > 0) {
    record_path("pieces");
    return run_control<T>(backward, logits, targets, dlogprob, in_rows, out_rows, rows, vocab,
                          logprob, dlogits, split, workspace, error_record, s);
  }
  const LogprobFixedPlan plan = logprob_fixed_plan(dtype, vocab, backward);
  FixedOrderArgs args{};
  args.logits = logits;
  args.targets = targets;
  args.dlogprob = dlogprob;
  args.in_rows = in_rows;
  args.out_rows = out_rows;
  args.vocab = vocab;
  args.run_groups = plan.block_entries / kGroup;
  args.vector = aligned_16(logits) && aligned_16(dlogits) &&
                (vocab * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  args.staged = plan.staged;
  args.logprob = logprob;
  args.dlogits = dlogits;
  args.error_record = error_record;
  if (backward) {
    record_path(plan.blocks > 1 ? "backward.cluster"
                : plan.staged   ? "backward.one-block"
                                : "backward.unstaged");
    return launch_fixed_order<T, true>(args, rows, plan, s);
  }
  if (args.vector && !split.registers_forward && streamed_forward_supported<T>()) {
    record_path("forward.streamed");
    return launch_streamed_forward<T>(args, rows, s);
  }
  record_path("forward.registers");
  launch_fixed_order<T, false>(args, rows, plan, s);
}

template <typename... Args>
void dispatch(DeviceDType dtype, Args&&... args) {
  switch (dtype) {
    case DeviceDType::bf16:
      return run<__nv_bfloat16>(args...);
    case DeviceDType::fp16:
      return run<__half>(args...);
    case DeviceDType::fp32:
      return run<float>(args...);
  }
}

}  // namespace

std::vector<PathDecl> logprob_paths(bool control) {
  if (control) return {PathDecl("pieces", "the vocabulary in pieces sized by the row count")};
  return {PathDecl("forward.streamed", "forward: one block streams its row through shared memory"),
          PathDecl("forward.registers",
                   "forward: the register-loading kernel (other GPUs, rows not 16-byte aligned)")
              .forceable("force_paths (or BITCHECK_LOGPROB_FORWARD=registers)"),
          PathDecl("backward.one-block", "backward: the row staged in one block's shared memory"),
          PathDecl("backward.cluster",
                   "backward: the row staged over a thread-block cluster, runs merged in order"),
          PathDecl("backward.unstaged", "backward: a row too long to stage, read twice")};
}

LogprobFixedPlan logprob_fixed_plan(DeviceDType dtype, std::int64_t vocab, bool backward) {
  const std::int64_t row_groups = (vocab + kGroup - 1) / kGroup;
  const LogprobFixedPlan unstaged{1, row_groups * kGroup, false};
  if (!backward) return unstaged;
  // Runs of at most kStageBytes each: ceil(row_groups / blocks) <= stage_groups.
  const std::int64_t stage_groups = kStageBytes / (kGroup * element_bytes(dtype));
  const std::int64_t blocks = (row_groups + stage_groups - 1) / stage_groups;
  if (blocks == 1) return {1, row_groups * kGroup, true};
  if (blocks > kMaxClusterBlocks || !clusters_supported(dtype)) return unstaged;
  return {blocks, (row_groups + blocks - 1) / blocks * kGroup, true};
}

LogprobSplit logprob_split_by_rows(std::int64_t rows, std::int64_t vocab, int sm_count) {
  // Like a split-softmax kernel sizing its vocabulary split to fill the GPU: blocks per row from
  // the batch, pieces rounded up to 8 entries.
  const std::int64_t wanted =
      rows < 1 ? 1 : (2 * static_cast<std::int64_t>(sm_count) + rows - 1) / rows;
  const std::int64_t splits = wanted < 1 ? 1 : (wanted > 64 ? 64 : wanted);
  std::int64_t piece = (vocab + splits - 1) / splits;
  piece = (piece + kGroup - 1) / kGroup * kGroup;
  return {piece, true};
}

std::size_t logprob_workspace_bytes(std::int64_t rows, std::int64_t vocab,
                                    const LogprobSplit& split) {
  if (split.piece <= 0) return 0;
  const std::int64_t pieces = (vocab + split.piece - 1) / split.piece;
  return static_cast<std::size_t>(rows * (pieces * 2 + 1)) * sizeof(float);
}

void logprob_forward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                     const std::int32_t* in_rows, const std::int32_t* out_rows, std::int64_t rows,
                     std::int64_t vocab, float* logprob, const LogprobSplit& split, void* workspace,
                     std::uint64_t* error_record, CUstream_st* stream) {
  check_call(rows, vocab, split);
  if (rows == 0) return;
  dispatch(dtype, false, dtype, logits, targets, static_cast<const float*>(nullptr), in_rows,
           out_rows, rows, vocab, logprob, static_cast<void*>(nullptr), split, workspace,
           error_record, as_stream(stream));
}

void logprob_backward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                      const float* dlogprob, const std::int32_t* in_rows,
                      const std::int32_t* out_rows, std::int64_t rows, std::int64_t vocab,
                      void* dlogits, const LogprobSplit& split, void* workspace,
                      std::uint64_t* error_record, CUstream_st* stream) {
  check_call(rows, vocab, split);
  if (rows == 0) return;
  dispatch(dtype, true, dtype, logits, targets, dlogprob, in_rows, out_rows, rows, vocab,
           static_cast<float*>(nullptr), dlogits, split, workspace, error_record,
           as_stream(stream));
}

}  // namespace bitcheck::cuda
