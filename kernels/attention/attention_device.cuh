// Device helpers shared by the attention kernels (attention_kernels.cu: mma.sync, the synchronous
// wgmma kernel, the SIMT kernels and the mma.sync backward; attention_forward_ws.cu: the
// warp-specialized wgmma kernels and the split-KV merge; attention_backward_wgmma.cu): conversions,
// asynchronous copies, the per-row online softmax and epilogue arithmetic whose sameness across
// kernels keeps their rows' bits the same, and the backward's gradient stores.
// Included only by .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "attention_kernels.h"
#include "common/cuda_check.cuh"
#include "common/wgmma.cuh"

namespace bitcheck::cuda::attention_device {

// setmaxnreg (sm_90a, templates so that no other target compiles them): a whole warpgroup gives
// back registers, or takes more, to the given count per thread.
template <int Registers>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

constexpr int warp_size = 32;
constexpr float log2_e = 1.4426950408889634f;
constexpr float ln_2 = 0.6931471805599453f;

// Two floats rounded to T, lo in the low half (the lower column of an mma fragment pair).
template <typename T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    bits = *reinterpret_cast<std::uint32_t*>(&pair);
  } else {
    __half2 pair = __floats2half2_rn(lo, hi);
    bits = *reinterpret_cast<std::uint32_t*>(&pair);
  }
  return bits;
}

// 2^x in one MUFU.EX2 (exp2f without fast math adds a subnormal fix-up around it); subnormal
// results flush to 0, the same for every row.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. Lane l receives row
// l/4, columns 2(l%4) and 2(l%4)+1 of each (ldmatrix_x4_trans in attention_kernels.cu: with .trans,
// rows 2(l%4) and 2(l%4)+1 of column l/4).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// 16-byte global-to-shared copy that bypasses L1; valid == false zero-fills and reads nothing.
__device__ __forceinline__ void copy_async_16(void* destination, const void* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)),
               "l"(__cvta_generic_to_global(source)), "r"(valid ? 16 : 0)
               : "memory");
}
// 4-byte global-to-shared copy (source and destination 4-byte aligned); valid == false zero-fills.
__device__ __forceinline__ void copy_async_4(void* destination, const void* source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(destination)),
               "l"(__cvta_generic_to_global(source)), "r"(valid ? 4 : 0)
               : "memory");
}
// An arrival on the mbarrier `bar` once this thread's earlier copies have landed, counted toward
// the arrivals the barrier's phase expects (.noinc).
__device__ __forceinline__ void copy_async_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar))
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void copy_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
template <int Pending>  // this thread's copy groups but the newest Pending have landed
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// How far (log2 units: the exponent of p) a block's row max may rise above the row's reference max
// before the reference moves to it. Below that the reference stays, alpha is exactly 1 and the
// accumulator is not rescaled; p = 2^(s scale log2 e - m scale log2 e) is then at most 2^8, which
// fp32 sums and the bf16/fp16 P operand hold with the same relative precision. The rule reads only
// the row's own scores and reference, so it is the same in every layout and kernel.
constexpr float attention_rescale_threshold = 8.0f;

// One KV block of the online softmax for a thread's two query rows (positions position[0..1]; lane
// quad t), everything but the accumulator: causal mask, the row's reference max (moved to the new
// row max when that is above it by more than attention_rescale_threshold, or on the first block
// with a key), l rescaled and summed, and s -> p in place; returns in alpha the factor the
// accumulator rows take (rescale_rows). Every tensor-core forward kernel calls it on the same
// accumulator layout, so their per-row arithmetic is the same.
template <int BN>
__device__ __forceinline__ void softmax_scores(float (&s)[BN / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], int first_key,
                                               int warp_first_position, const int (&position)[2],
                                               int t, float scale_log2) {
  // Per-element causal mask by the row's own position; a block entirely at or before the
  // warp's first row has nothing to mask, and skipping the test there changes no bit.
  if (first_key + BN - 1 > warp_first_position) {
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (first_key + nt * 8 + 2 * t + (e & 1) > position[e >> 1]) s[nt][e] = -INFINITY;
      }
    }
  }
  // Online softmax in log2 units: p = 2^(s * scale * log2(e) - m * scale * log2(e)).
  float m_new[2] = {m[0], m[1]};
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) m_new[e >> 1] = fmaxf(m_new[e >> 1], s[nt][e]);
  }
  float m_scaled[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 1));
    m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 2));
    // The reference stays unless the block raises it by more than the threshold (NaN compares
    // false: an infinite score moves it, as before).
    if (m[r] != -INFINITY &&
        __fmul_rn(__fsub_rn(m_new[r], m[r]), scale_log2) <= attention_rescale_threshold)
      m_new[r] = m[r];
    // Exactly 1 when the reference stays (a fully masked block among them); exactly 0 on the
    // first real block (m = -inf), never -inf - -inf.
    alpha[r] =
        m_new[r] == m[r] ? 1.0f : fast_exp2(__fmul_rn(__fsub_rn(m[r], m_new[r]), scale_log2));
    m[r] = m_new[r];
    m_scaled[r] = m_new[r] == -INFINITY ? 0.0f : __fmul_rn(m_new[r], scale_log2);
    l[r] = __fmul_rn(l[r], alpha[r]);
  }
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = fast_exp2(fmaf(s[nt][e], scale_log2, -m_scaled[e >> 1]));  // masked: 2^-inf = 0
      l[e >> 1] = __fadd_rn(l[e >> 1], s[nt][e]);
    }
  }
}

// P (the block's p, in place of its scores) as wgmma / mma.sync A fragments: keys 16kc..16kc+15 are
// the accumulator layout of S columns 2kc and 2kc + 1, each pair rounded to T.
template <typename T, int BN>
__device__ __forceinline__ void pack_p_fragments(const float (&s)[BN / 8][4],
                                                 std::uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kc = 0; kc < BN / 16; ++kc) {
    pa[kc][0] = pack_pair<T>(s[2 * kc][0], s[2 * kc][1]);
    pa[kc][1] = pack_pair<T>(s[2 * kc][2], s[2 * kc][3]);
    pa[kc][2] = pack_pair<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
    pa[kc][3] = pack_pair<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
  }
}

// O += P·V of one block of Keys keys (sm_90a wgmma kernels only): Keys / 16 steps of m64nDk16 in
// order with P in registers and V from the descriptor v_desc0 advanced by v_stage (16-byte units,
// the stage's offset), committed, not waited for.
template <typename T, int D, int Keys>
__device__ __forceinline__ void issue_pv(float (&acc)[D / 8][4],
                                         const std::uint32_t (&pa)[Keys / 16][4],
                                         std::uint64_t v_desc0, std::uint32_t v_stage) {
  wgmma::fence();
#pragma unroll
  for (int kc = 0; kc < Keys / 16; ++kc) {
    const std::uint64_t v_desc = wgmma::advance(v_desc0, v_stage + kc * (16 * 128 >> 4));
    if constexpr (D == 128) {
      wgmma::rs_m64n128k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), pa[kc], v_desc);
    } else {
      wgmma::rs_m64n64k16<T>(reinterpret_cast<float(&)[D / 2]>(acc), pa[kc], v_desc);
    }
  }
  wgmma::commit();
}

// The accumulator rows times the block's alpha (rows g and g + 8 of the m16n8 / m64nN layout).
template <int D>
__device__ __forceinline__ void rescale_rows(float (&acc)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    acc[dt][0] = __fmul_rn(acc[dt][0], alpha[0]);
    acc[dt][1] = __fmul_rn(acc[dt][1], alpha[0]);
    acc[dt][2] = __fmul_rn(acc[dt][2], alpha[1]);
    acc[dt][3] = __fmul_rn(acc[dt][3], alpha[1]);
  }
}

// softmax_scores then rescale_rows: one whole block of the online softmax.
template <int BN, int D>
__device__ __forceinline__ void softmax_block(float (&s)[BN / 8][4], float (&acc)[D / 8][4],
                                              float (&m)[2], float (&l)[2], int first_key,
                                              int warp_first_position, const int (&position)[2],
                                              int t, float scale_log2) {
  float alpha[2];
  softmax_scores<BN>(s, m, l, alpha, first_key, warp_first_position, position, t, scale_log2);
  // Times exactly 1 leaves every bit (a NaN's payload aside): a warp none of whose rows moved its
  // reference skips the rescale, as the warp-specialized kernel does.
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) rescale_rows<D>(acc, alpha);
}

// A row's sum l from the four lanes of its quad (each holds its share), in a fixed pattern.
__device__ __forceinline__ void reduce_row_sums(float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 1));
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 2));
  }
}

// o = acc / l: a row's reciprocal of l once (division_reciprocal: rcp.approx and one Newton step),
// then per element the quotient and its correction (division_quotient), the very operations nvcc
// emits for __fdiv_rn, less its range check (FCHK) and the slow path behind it, which cost a
// branch, a convergence barrier and a reciprocal per element. With 64 of them per thread, the
// epilogue of a prefill work item cost about as much as two key blocks: without them the head-dim-
// 128 forward took 7-8 % less time at L = 2048 (batch 4), 13 % at 1024 (batch 16), 1-2 % at 4096
// and 8192 (batch 4) and up to 4 % at 4096 (batch 1) (H100, same call). Wherever every intermediate
// is a normal number (l in [1/2, 2^24], which holds for every row with a key: its largest p is 1 up
// to the rounding of its exponent; |acc| in [2^-90, 2^100]) this is the correctly rounded quotient,
// the bits of __fdiv_rn (a GPU test compares them on 2^29 random pairs); acc = +-0 gives +-0.
// Outside that range (an infinite or NaN acc, a tiny one) the result is what these operations give
// (NaN for an infinite acc), the same in every kernel: all of them divide here.
__device__ __forceinline__ float division_reciprocal(float l) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(l));
  return __fmaf_rn(y0, __fmaf_rn(y0, -l, 1.0f), y0);
}
__device__ __forceinline__ float division_quotient(float acc, float l, float y) {
  const float q = __fmul_rn(y, acc);
  return copysignf(__fmaf_rn(y, __fmaf_rn(q, -l, acc), q), acc);  // the sign: only for acc = -0
}

// A row's output and lse from its final state: o = acc / l rounded to T (division_quotient), and
// lse = (m * scale * log2(e) + log2(l)) * ln(2). The split-KV merge kernel computes the same.
template <typename T>
__device__ __forceinline__ T output_element(float acc, float l) {
  const float o = division_quotient(acc, l, division_reciprocal(l));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(o);
  } else {
    return __float2half_rn(o);
  }
}
__device__ __forceinline__ float row_lse(float m, float l, float scale_log2) {
  // Explicitly rounded, like the softmax state: with FMA contraction left to the compiler, a
  // query's lse differed on an H200 between prefill and the decode / one-token-chunk layouts,
  // where the query sits in another of its warp's 16 rows (another register of another lane).
  return __fmul_rn(__fadd_rn(__fmul_rn(m, scale_log2), log2f(l)), ln_2);
}

// The end of the tensor-core forward kernels for one warp's 16 rows, queries at slots first_slot,
// first_slot + 1, ... of head h (the first valid_rows of them real), with l already summed over
// the lane quad: o = acc / l (division_quotient) rounded to T and staged in o_s (16 rows of D + 8
// elements that only this warp uses), stored as whole 16-byte chunks, and lse.
template <typename T, int D>
__device__ __forceinline__ void store_rows_reduced(const float (&acc)[D / 8][4],
                                                   const float (&m)[2], const float (&l)[2], T* o_s,
                                                   T* o, float* lse, int first_slot, int valid_rows,
                                                   int h, int lane, std::int64_t q_stride,
                                                   int heads, float scale_log2) {
  constexpr int stride = D + 8;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float y = division_reciprocal(l[r]);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<std::uint32_t*>(o_s + (g + 8 * r) * stride + dt * 8 + 2 * t) =
          pack_pair<T>(division_quotient(acc[dt][2 * r], l[r], y),
                       division_quotient(acc[dt][2 * r + 1], l[r], y));
    }
  }
  __syncwarp();
  constexpr int chunks = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * chunks / warp_size; ++i) {
    const int chunk = lane + i * warp_size, row = chunk / chunks, column = chunk % chunks * 8;
    if (row >= valid_rows) continue;
    *reinterpret_cast<uint4*>(o + (first_slot + row) * q_stride + h * D + column) =
        *reinterpret_cast<const uint4*>(o_s + row * stride + column);
  }
  if (t != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row < valid_rows) {
      lse[(first_slot + row) * static_cast<std::int64_t>(heads) + h] =
          row_lse(m[r], l[r], scale_log2);
    }
  }
}

// reduce_row_sums then store_rows_reduced.
template <typename T, int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], const float (&m)[2],
                                           float (&l)[2], T* o_s, T* o, float* lse, int first_slot,
                                           int valid_rows, int h, int lane, std::int64_t q_stride,
                                           int heads, float scale_log2) {
  reduce_row_sums(l);
  store_rows_reduced<T, D>(acc, m, l, o_s, o, lse, first_slot, valid_rows, h, lane, q_stride, heads,
                           scale_log2);
}

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

// Each of `threads` threads (`thread` its index among them) copies its share of `rows` rows of D
// elements into swizzled panels; row r comes from source + r * row_stride, and rows at or past
// valid_rows become zeros.
template <typename T, int D, int rows, int threads>
__device__ __forceinline__ void load_swizzled_async(unsigned char* shared, const T* source,
                                                    std::int64_t row_stride, int valid_rows,
                                                    int thread = static_cast<int>(threadIdx.x)) {
  constexpr int chunks = D / 8;
  static_assert(rows * chunks % threads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < rows * chunks / threads; ++i) {
    const int chunk = thread + i * threads, row = chunk / chunks, column = chunk % chunks;
    const bool valid = row < valid_rows;
    unsigned char* destination =
        shared + (column / 8) * rows * 128 + row * 128 + (((column % 8) ^ (row % 8)) << 4);
    copy_async_16(destination, valid ? source + row * row_stride + column * 8 : source, valid);
  }
}

// One warp (lane its lane) copies a block of BN keys x D elements into 128-byte swizzled panels of
// BN * 128 bytes, key k from source + k * row_stride, keys at or past valid_keys as zeros: a
// producer warp's copy of a block TMA cannot cut at an arbitrary key. One 16-byte chunk per lane at
// a time (producers run on few registers); the caller commits and waits.
template <typename T, int D, int BN>
__device__ __forceinline__ void copy_block_zero_tail_async(unsigned char* destination,
                                                           const T* source, std::int64_t row_stride,
                                                           int valid_keys, int lane) {
  constexpr int chunks = D / 8;
#pragma unroll 1
  for (int chunk = lane; chunk < BN * chunks; chunk += warp_size) {
    const int key = chunk / chunks, column = chunk % chunks;
    const bool valid = key < valid_keys;
    copy_async_16(
        destination + (column / 8) * BN * 128 + key * 128 + (((column % 8) ^ (key % 8)) << 4),
        valid ? source + key * row_stride + column * 8 : source, valid);
  }
}

// The Q tile of a CTA whose rows are `pack` heads x per_head queries (row r: head first_head +
// r / per_head, query r % per_head, real when below count); the rest become zeros.
template <typename T, int D, int rows, int threads>
__device__ __forceinline__ void load_packed_queries_async(
    unsigned char* shared, const T* q, std::int64_t q_stride, int first_slot, int first_head,
    int per_head, int count, int thread = static_cast<int>(threadIdx.x)) {
  constexpr int chunks = D / 8;
  static_assert(rows * chunks % threads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < rows * chunks / threads; ++i) {
    const int chunk = thread + i * threads, row = chunk / chunks, column = chunk % chunks;
    const int query = row % per_head;
    const bool valid = query < count;
    unsigned char* destination =
        shared + (column / 8) * rows * 128 + row * 128 + (((column % 8) ^ (row % 8)) << 4);
    copy_async_16(
        destination,
        valid ? q + (first_slot + query) * q_stride + (first_head + row / per_head) * D + column * 8
              : q,
        valid);
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
