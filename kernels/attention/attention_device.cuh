// Device code shared by the attention kernel families: instruction wrappers (mma.sync, ldmatrix,
// cp.async, setmaxnreg), the loads into shared memory, the per-row online softmax, chunk merge and
// epilogue arithmetic whose sameness across kernels keeps their rows' bits the same, the SIMT warp
// reductions, and the dtype dispatch of the launchers. The backward kernels' own shared code is in
// attention_backward_device.cuh. Included only by .cu files.
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

// The sm_90a device pass (wgmma, TMA, setmaxnreg); the other passes compile those kernels as traps.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BITCHECK_ATTENTION_SM90A 1
#endif

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
// l/4, columns 2(l%4) and 2(l%4)+1 of each.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// Like ldmatrix_x4, transposed: lane l receives rows 2(l%4) and 2(l%4)+1 of column l/4 of each
// matrix.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// C += A·B on mma.sync m16n8k16 with fp32 accumulation: an A fragment (rows g, g + 8) and the two
// registers of a B fragment, C in the accumulator layout (rows g, g + 8, columns 2t, 2t + 1).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
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

// Every thread of the CTA copies its share of `rows` rows of D elements (row r at source +
// r * row_stride) into shared rows of D + 8; rows at or past valid_rows become zeros, so padding
// never reads past the tensor and never holds stale or uninitialized values.
template <typename T, int D, int rows, int threads>
__device__ __forceinline__ void load_rows_async(T* shared, const T* source, std::int64_t row_stride,
                                                int valid_rows) {
  constexpr int chunks = D / 8, stride = D + 8;
  static_assert(rows * chunks % threads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < rows * chunks / threads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * threads, row = chunk / chunks,
              column = chunk % chunks * 8;
    const bool valid = row < valid_rows;
    copy_async_16(shared + row * stride + column,
                  valid ? source + row * row_stride + column : source, valid);
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

// This thread's warp and lane in a CTA of warps, the lane's rows g, g + 8 and columns 2t, 2t + 1
// in an mma accumulator, and the elements between two slots' rows of q-shaped ([slots, heads, D])
// and k-shaped ([slots, kv_heads, D]) tensors.
template <int D>
struct CtaThread {
  int warp, lane, g, t;
  std::int64_t q_stride, kv_stride;
  __device__ __forceinline__ explicit CtaThread(AttentionShape shape)
      : warp(static_cast<int>(threadIdx.x) / warp_size),
        lane(static_cast<int>(threadIdx.x) % warp_size),
        g(lane >> 2),
        t(lane & 3),
        q_stride(static_cast<std::int64_t>(shape.heads) * D),
        kv_stride(static_cast<std::int64_t>(shape.kv_heads) * D) {}
};

// A CTA over one head h of one tile of query rows (blockIdx.x = tile index * heads + h), which
// streams the blocks of BN keys of the tile's sequence from position 0 to its last row's block
// (the forward and the dq kernels), and this thread in it. The members are in the order the
// kernels compute them: another order changes the kernels' compiled code.
template <typename Tile, int D, int BN>
struct HeadTileCta {
  Tile tile;
  int h, kv_head;
  CtaThread<D> thread;
  int last_position, last_block;
  __device__ __forceinline__ HeadTileCta(const Tile* tiles, AttentionShape shape)
      : tile(tiles[blockIdx.x / shape.heads]),
        h(static_cast<int>(blockIdx.x % shape.heads)),
        kv_head(h / (shape.heads / shape.kv_heads)),
        thread(shape),
        last_position(tile.start_position + tile.count - 1),
        last_block(last_position / BN) {}
};

// `rows` rows of D elements (row r at source + r * row_stride, rows at or past valid_rows as
// zeros) copied by `threads` threads: load_rows_async's padded rows of D + 8 (the mma.sync
// kernels) or, Swizzled, load_swizzled_async's 128-byte swizzled panels (the wgmma kernels).
template <bool Swizzled, typename T, int D, int rows, int threads, typename Shared>
__device__ __forceinline__ void load_tile_rows(Shared* shared, const T* source,
                                               std::int64_t row_stride, int valid_rows) {
  if constexpr (Swizzled) {
    load_swizzled_async<T, D, rows, threads>(shared, source, row_stride, valid_rows);
  } else {
    load_rows_async<T, D, rows, threads>(shared, source, row_stride, valid_rows);
  }
}

// Keys block * BN .. of a sequence (key 0's rows at k_sequence and v_sequence, kv_stride elements
// apart) into stage `stage` of the K and V buffers at k_s and v_s (stage_size elements or bytes
// each) by load_tile_rows, keys past last_position (the CTA's last query) as zeros.
template <bool Swizzled, typename T, int D, int BN, int threads, typename Shared>
__device__ __forceinline__ void load_kv_block(Shared* k_s, Shared* v_s, int stage_size, int stage,
                                              const T* k_sequence, const T* v_sequence,
                                              std::int64_t kv_stride, int block,
                                              int last_position) {
  const int valid_keys = last_position - block * BN + 1;
  load_tile_rows<Swizzled, T, D, BN, threads>(
      k_s + stage * stage_size, k_sequence + block * BN * kv_stride, kv_stride, valid_keys);
  load_tile_rows<Swizzled, T, D, BN, threads>(
      v_s + stage * stage_size, v_sequence + block * BN * kv_stride, kv_stride, valid_keys);
}

// The top of step `step` of a two-stage cp.async pipeline of `count` steps: this thread's copies
// of the step have landed, then everyone's (the barrier: nobody still reads the other stage), and
// the copies of step + 1 into the other stage are under way (load(next step, its stage)).
template <typename Load>
__device__ __forceinline__ void two_stage_step(int step, int count, Load& load) {
  copy_async_wait_all();
  __syncthreads();
  if (step + 1 < count) load(step + 1, (step + 1) & 1);
  copy_async_commit();
}
// The same over key blocks 0..last_block.
template <typename Load>
__device__ __forceinline__ void two_stage_block(int block, int last_block, Load& load) {
  copy_async_wait_all();
  __syncthreads();
  if (block < last_block) load(block + 1, (block + 1) & 1);
  copy_async_commit();
}

// A warp's accumulator rows set to zero; two of them in one pass.
template <int N>
__device__ __forceinline__ void clear_accumulators(float (&a)[N][4]) {
#pragma unroll
  for (int dt = 0; dt < N; ++dt) a[dt][0] = a[dt][1] = a[dt][2] = a[dt][3] = 0.0f;
}
template <int N>
__device__ __forceinline__ void clear_accumulators(float (&a)[N][4], float (&b)[N][4]) {
#pragma unroll
  for (int dt = 0; dt < N; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) a[dt][e] = b[dt][e] = 0.0f;
  }
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

// The weights of merging a chunk's state (max m > -inf, sum l over the row) into a row's merged
// state (M, L): M' = max(M, m), a = 2^((M - M') * scale log2 e) and b likewise for m (exactly 1
// for the larger), L' = L a + l b; each accumulator element then merge_element(A, a, acc, b).
__device__ __forceinline__ void chunk_merge_weights(float& M, float& L, float m, float l,
                                                    float scale_log2, float& a, float& b) {
  const float m_new = fmaxf(M, m);
  a = M == m_new ? 1.0f : fast_exp2(__fmul_rn(__fsub_rn(M, m_new), scale_log2));
  b = m == m_new ? 1.0f : fast_exp2(__fmul_rn(__fsub_rn(m, m_new), scale_log2));
  M = m_new;
  L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(l, b));
}
__device__ __forceinline__ float merge_element(float A, float a, float acc, float b) {
  return __fadd_rn(__fmul_rn(A, a), __fmul_rn(acc, b));
}

// ---------------------------------------------------------------------------------------------
// The SIMT kernels: warps of 32 lanes, simt_warps of them per CTA, each lane holding
// simt_dims_per_lane of a row's dims.
constexpr int simt_warps = 4;  // warps per CTA in the SIMT kernels
constexpr int simt_max_dim = 128;
constexpr int simt_dims_per_lane = simt_max_dim / warp_size;

// Butterfly reductions: every lane ends with the same bits (a + b == b + a), in a fixed pattern.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// CTAs of the SIMT kernels for `items` warps.
inline unsigned warp_grid(std::int64_t items) {
  return static_cast<unsigned>((items + simt_warps - 1) / simt_warps);
}

// body(T{}) with T the element type of `dtype`.
template <typename F>
void dispatch(DeviceDType dtype, F&& body) {
  switch (dtype) {
    case DeviceDType::bf16:
      body(__nv_bfloat16{});
      return;
    case DeviceDType::fp16:
      body(__half{});
      return;
    case DeviceDType::fp32:
      body(float{});
      return;
  }
}

// body(T{}, std::integral_constant<int, D>{}) for the tensor-core kernels: T bf16 or fp16 (any
// dtype but bf16 runs as fp16: the callers turn fp32 away first), D 64 or 128 (any dim but 64 as
// 128).
template <typename F>
void dispatch_tensor_core(DeviceDType dtype, int dim, F&& body) {
  using Dim64 = std::integral_constant<int, 64>;
  using Dim128 = std::integral_constant<int, 128>;
  if (dtype == DeviceDType::bf16) {
    dim == 64 ? body(__nv_bfloat16{}, Dim64{}) : body(__nv_bfloat16{}, Dim128{});
  } else {
    dim == 64 ? body(__half{}, Dim64{}) : body(__half{}, Dim128{});
  }
}

}  // namespace bitcheck::cuda::attention_device
