// The portable attention forward kernels: mma.sync (bf16/fp16, head dim 64 or 128, any GPU from
// sm_80) and SIMT (any dtype, head dim up to 128), with the KV-cache write every forward layout
// runs first and the GPU test of the epilogue's division. attention_plan.cu checks the arguments
// and records the paths.
//
// Kernels:
//   forward_mma_kernel<T, D>  tiles of up to 128 queries, a head per CTA: forward.mma-sync
//   forward_simt_kernel<T>    a warp per (query, head, split): forward.simt; with splits > 1
//                             forward.simt.split-kv, the control (combine_kernel in
//                             attention_decode.cu joins the splits)
//   write_cache_kernel<T>     a slot's k, v rows into its KV-cache row (no path: every layout)
//   division_test_kernel      division_quotient against __fdiv_rn (attention_division_mismatches)
//
// Why a row's bits do not depend on the batch: forward_mma_kernel reduces a row's keys in 64-key
// blocks aligned to position 0 of its sequence, from block 0 upward, with the per-element mma
// products, the per-row softmax and epilogue (attention_device.cuh) and the per-element causal mask
// of the synchronous wgmma kernel (attention_forward_wgmma_synchronous.cu says why no other row
// enters); the tile and its size are scheduling. forward_simt_kernel walks a row's keys in blocks
// of kv_block from position 0 in order; split, its block ranges come from `splits`, which the
// control sets from the batch: the drift it exists to show.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "attention_device.cuh"
#include "attention_kernels.h"
#include "attention_launchers.h"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"

namespace bitcheck::cuda {
namespace {

using namespace attention_device;

// KV cache write: one CTA per slot.
template <typename T>
__global__ void write_cache_kernel(const T* k, const T* v, T* k_cache, T* v_cache,
                                   const int* cache_rows, int row_width) {
  const int row = cache_rows[blockIdx.x];
  if (row < 0) return;
  for (int c = threadIdx.x; c < row_width; c += blockDim.x) {
    k_cache[static_cast<std::int64_t>(row) * row_width + c] =
        k[static_cast<std::int64_t>(blockIdx.x) * row_width + c];
    v_cache[static_cast<std::int64_t>(row) * row_width + c] =
        v[static_cast<std::int64_t>(blockIdx.x) * row_width + c];
  }
}

// Tensor-core forward, flash-attention-2 style, on mma.sync m16n8k16 with fp32 accumulation (the
// same instructions in the sm_90a code and the compute_80 PTX, so no arch-specific path). A CTA of
// 8 warps takes up to 128 queries of one segment and one head; each warp owns 16 query rows and
// keeps their Q A-fragments in registers for the whole KV loop. K and V blocks of 64 keys stream
// through a two-stage cp.async pipeline: block b + 1 is in flight while block b is computed, one
// barrier per block. Shared rows are padded by 16 bytes, so the 8 rows an ldmatrix phase reads
// start in 8 different 16-byte bank groups (no bank conflicts). S = Q·Kᵀ stays in registers,
// becomes P (rounded to the input dtype for P·V, as flash-attention does) and is fed straight back
// as the A-fragment of O += P·V; V's B-fragments come from ldmatrix.trans.
template <typename T, int D>
struct ForwardTile {
  static constexpr int queries = attention_mma_tile_queries;
  static constexpr int keys = attention_mma_kv_block;
  static constexpr int warps = queries / 16;
  static constexpr int threads = warps * warp_size;
  static constexpr int stride = D + 8;  // elements per shared row
  static constexpr int stages = 2;
  static constexpr int q_elements = queries * stride;
  static constexpr int kv_elements = keys * stride;  // one stage of K or of V
  static constexpr int shared_bytes =
      (q_elements + 2 * stages * kv_elements) * static_cast<int>(sizeof(T));
  static_assert(queries % 16 == 0 && keys % 16 == 0 && D % 16 == 0,
                "mma tiles are 16 rows, 16 keys, 16 dims");
};

// Grid: one CTA per (tile, head), heads of a tile adjacent (they share K/V through L2). Warp w
// owns tile rows 16w..16w+15; lane l holds rows l/4 and l/4 + 8, key (or dim) columns 2(l%4) and
// 2(l%4) + 1 of every 8-wide mma tile. The softmax state m (row max of raw scores) and l (this
// lane's share of the row sum, summed over the quad at the end) is per row.
template <typename T, int D>
__global__ void __launch_bounds__(ForwardTile<T, D>::threads, 1)
    forward_mma_kernel(const T* q, const T* k_cache, const T* v_cache, T* o, float* lse,
                       const AttentionTile* tiles, AttentionShape shape) {
  using Tile = ForwardTile<T, D>;
  constexpr int BN = Tile::keys, stride = Tile::stride, element_bytes = static_cast<int>(sizeof(T));
  constexpr int row_bytes = stride * element_bytes, stage_bytes = Tile::kv_elements * element_bytes;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* q_s = reinterpret_cast<T*>(shared_raw);  // the Q tile; afterwards each warp's output rows
  T* k_s = q_s + Tile::q_elements;            // [stages][keys][stride]
  T* v_s = k_s + Tile::stages * Tile::kv_elements;

  const HeadTileCta<AttentionTile, D, BN> cta(tiles, shape);
  const AttentionTile& tile = cta.tile;
  const CtaThread<D>& thread = cta.thread;
  const T* q_tile = q + tile.first_slot * thread.q_stride + cta.h * D;
  const T* k_sequence =
      k_cache + tile.cache_base * thread.kv_stride + cta.kv_head * D;  // key of position 0
  const T* v_sequence = v_cache + tile.cache_base * thread.kv_stride + cta.kv_head * D;
  auto load_block = [&](int block, int stage) {  // keys past the tile's last query become zeros
    load_kv_block<false, T, D, BN, Tile::threads>(k_s, v_s, Tile::kv_elements, stage, k_sequence,
                                                  v_sequence, thread.kv_stride, block,
                                                  cta.last_position);
  };

  load_rows_async<T, D, Tile::queries, Tile::threads>(q_s, q_tile, thread.q_stride, tile.count);
  load_block(0, 0);
  copy_async_commit();
  copy_async_wait_all();
  __syncthreads();

  const int r0 = thread.warp * 16;
  std::uint32_t qa[D / 16][4];
  {
    // A-fragment of rows r0..r0+15, dims 16kc..16kc+15: matrices (rows 0-7 | 8-15) x (dims 0-7 |
    // 8-15).
    const unsigned q_lane =
        shared_address(q_s) +
        ((r0 + (thread.lane & 15)) * stride + (thread.lane >> 4) * 8) * element_bytes;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) ldmatrix_x4(qa[kc], q_lane + kc * 16 * element_bytes);
  }
  // K B-fragments for key tiles 2j, 2j + 1: matrices (keys 0-7, dims 0-7 | 8-15), (keys 8-15, ...).
  const unsigned k_lane =
      shared_address(k_s) +
      (((thread.lane & 7) + ((thread.lane >> 4) << 3)) * stride + ((thread.lane >> 3) & 1) * 8) *
          element_bytes;
  // V B-fragments (ldmatrix.trans) for dim tiles 2j, 2j + 1: (keys 0-7 | 8-15, dims 0-7), (...,
  // dims 8-15).
  const unsigned v_lane =
      shared_address(v_s) + ((thread.lane & 15) * stride + (thread.lane >> 4) * 8) * element_bytes;

  float acc[D / 8][4];
  clear_accumulators(acc);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int warp_first_position = tile.start_position + r0;
  const int position[2] = {warp_first_position + thread.g, warp_first_position + thread.g + 8};
  // Rows past tile.count are padding: never stored, so they need no block of their own.
  const int warp_last_position =
      r0 < tile.count ? tile.start_position + min(r0 + 15, tile.count - 1) : -1;
  const float scale_log2 = shape.scale * log2_e;

  for (int block = 0; block <= cta.last_block; ++block) {
    if (block > 0) {
      copy_async_wait_all();  // this thread's copies of the block have landed
      __syncthreads();        // everyone's have, and nobody still reads the other stage
    }
    if (block < cta.last_block) load_block(block + 1, (block + 1) & 1);
    copy_async_commit();
    // A block past every real row of this warp would leave each row bit-identical: skip it.
    if (block * BN > warp_last_position) continue;
    const unsigned stage_offset = static_cast<unsigned>((block & 1) * stage_bytes);

    float s[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int pair = 0; pair < BN / 16; ++pair) {
        std::uint32_t kb[4];
        ldmatrix_x4(kb, k_lane + stage_offset + pair * 16 * row_bytes + kc * 16 * element_bytes);
        mma_16816<T>(s[2 * pair], qa[kc], kb[0], kb[1]);
        mma_16816<T>(s[2 * pair + 1], qa[kc], kb[2], kb[3]);
      }
    }
    softmax_block<BN, D>(s, acc, m, l, block * BN, warp_first_position, position, thread.t,
                         scale_log2);
    // O += P·V: the accumulator layout of S tiles 2kc, 2kc + 1 is the A-fragment layout of keys
    // 16kc..16kc+15, so P never leaves registers.
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      const std::uint32_t pa[4] = {pack_pair<T>(s[2 * kc][0], s[2 * kc][1]),
                                   pack_pair<T>(s[2 * kc][2], s[2 * kc][3]),
                                   pack_pair<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                   pack_pair<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int pair = 0; pair < D / 16; ++pair) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb,
                          v_lane + stage_offset + kc * 16 * row_bytes + pair * 16 * element_bytes);
        mma_16816<T>(acc[2 * pair], pa, vb[0], vb[1]);
        mma_16816<T>(acc[2 * pair + 1], pa, vb[2], vb[3]);
      }
    }
  }
  if (r0 >= tile.count) return;  // padding only; no barrier follows

  store_rows<T, D>(acc, m, l, q_s + r0 * stride, o, lse, tile.first_slot + r0, tile.count - r0,
                   cta.h, thread.lane, thread.q_stride, shape.heads, scale_log2);
}

// SIMT forward: one warp per (query, head, split). Lane j of a 32-key step owns key j's score (a
// sequential dot product); the value update walks the step's keys in order, each lane owning
// dims lane, lane + 32, ... The online-softmax rescale happens once per kv_block keys.
template <typename T>
__global__ void forward_simt_kernel(const T* q, const T* k_cache, const T* v_cache, T* o,
                                    float* lse, const AttentionToken* tokens, int token_count,
                                    AttentionShape shape, int kv_block, int splits,
                                    float* scratch) {
  __shared__ float q_shared[simt_warps][simt_max_dim];
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * simt_warps + warp;
  if (item >= static_cast<std::int64_t>(token_count) * shape.heads * splits) return;
  const int split = static_cast<int>(item % splits),
            h = static_cast<int>((item / splits) % shape.heads);
  const AttentionToken token = tokens[item / splits / shape.heads];
  const int D = shape.dim, kv_head = h / (shape.heads / shape.kv_heads);
  const std::int64_t kv_stride = static_cast<std::int64_t>(shape.kv_heads) * D;
  const T* q_row = q + (static_cast<std::int64_t>(token.slot) * shape.heads + h) * D;
  for (int d = lane; d < D; d += warp_size) q_shared[warp][d] = to_float(q_row[d]);
  __syncwarp();
  const int blocks = token.position / kv_block + 1, per_split = (blocks + splits - 1) / splits;
  const int first_block = split * per_split, end_block = min(blocks, first_block + per_split);
  float m = -INFINITY, l = 0.0f, acc[simt_dims_per_lane] = {};
  for (int block = first_block; block < end_block; ++block) {
    float p[simt_max_dim / warp_size];
    float block_max = -INFINITY;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      const int key = block * kv_block + step * warp_size + lane;
      float score = -INFINITY;
      if (key <= token.position) {
        const T* key_row = k_cache + (token.cache_base + key) * kv_stride + kv_head * D;
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += q_shared[warp][d] * to_float(key_row[d]);
        score = dot * shape.scale;
      }
      p[step] = score;
      block_max = fmaxf(block_max, score);
    }
    block_max = warp_max(block_max);
    const float m_new = fmaxf(m, block_max), alpha = expf(m - m_new);
    float lane_sum = 0.0f;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      p[step] = expf(p[step] - m_new);
      lane_sum += p[step];
    }
    l = l * alpha + warp_sum(lane_sum);
    m = m_new;
    for (int i = 0; i < simt_dims_per_lane; ++i) acc[i] *= alpha;
    for (int step = 0; step < kv_block / warp_size; ++step) {
      for (int j = 0; j < warp_size; ++j) {
        const int key = block * kv_block + step * warp_size + j;
        const float pj = __shfl_sync(0xffffffffu, p[step], j);
        if (key > token.position) break;
        const T* value_row = v_cache + (token.cache_base + key) * kv_stride + kv_head * D;
        for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
          acc[i] += pj * to_float(value_row[lane + i * warp_size]);
      }
    }
  }
  const std::int64_t row = static_cast<std::int64_t>(token.slot) * shape.heads + h;
  if (splits == 1) {
    for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
      o[row * D + lane + i * warp_size] = from_float<T>(acc[i] / l);
    if (lane == 0) lse[row] = m + logf(l);
    return;
  }
  float* partial = scratch + (item / splits * splits + split) * (D + 2);
  for (int i = 0; i < simt_dims_per_lane && lane + i * warp_size < D; ++i)
    partial[lane + i * warp_size] = acc[i];
  if (lane == 0) {
    partial[D] = m;
    partial[D + 1] = l;
  }
}

__device__ __forceinline__ std::uint64_t division_test_hash(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Pair i: l = 2^e (1 + m / 2^23), e in [-1, 23]; acc = +-2^e' (1 + m' / 2^23), e' in [-90, 99], or
// +-0 for one pair in 64.
__global__ void division_test_kernel(std::int64_t pairs, std::uint64_t seed, bool naive,
                                     unsigned long long* mismatches) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long count = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    const std::uint64_t h = division_test_hash(seed ^ division_test_hash(i));
    const auto l_bits = static_cast<std::uint32_t>(((126 + h % 25) << 23) | ((h >> 8) & 0x7fffff));
    const std::uint64_t h2 = division_test_hash(h);
    std::uint32_t acc_bits = static_cast<std::uint32_t>(
        ((127 - 90 + h2 % 190) << 23) | ((h2 >> 8) & 0x7fffff) | ((h2 >> 40) & 1u) << 31);
    if (((h2 >> 48) & 63) == 0) acc_bits &= 0x80000000u;  // +-0
    const float l = __uint_as_float(l_bits), acc = __uint_as_float(acc_bits);
    const float ours = naive ? __fmul_rn(acc, __frcp_rn(l))
                             : attention_device::division_quotient(
                                   acc, l, attention_device::division_reciprocal(l));
    count += __float_as_uint(ours) != __float_as_uint(__fdiv_rn(acc, l));
  }
  if (count) atomicAdd(mismatches, count);
}

template <typename T, int D>
void launch_mma(const void* q, const void* k_cache, const void* v_cache, void* o, float* lse,
                const AttentionTile* tiles, int tile_count, AttentionShape shape,
                CUstream_st* stream) {
  using Tile = ForwardTile<T, D>;
  static bool configured = false;
  if (!configured) {
    BITCHECK_CUDA_CALL(cudaFuncSetAttribute(
        forward_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::shared_bytes));
    configured = true;
  }
  const std::int64_t ctas = static_cast<std::int64_t>(tile_count) * shape.heads;
  if (ctas > std::numeric_limits<int>::max())
    throw std::invalid_argument("attention_forward_mma: tiles * heads exceeds the grid");
  forward_mma_kernel<T, D>
      <<<static_cast<unsigned>(ctas), Tile::threads, Tile::shared_bytes, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
          static_cast<T*>(o), lse, tiles, shape);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_write_cache(DeviceDType dtype, const void* k, const void* v, void* k_cache,
                           void* v_cache, const int* cache_rows, int slots, int row_width,
                           CUstream_st* stream) {
  if (slots <= 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    write_cache_kernel<T><<<slots, 128, 0, stream>>>(
        static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache),
        static_cast<T*>(v_cache), cache_rows, row_width);
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void launch_forward_mma_sync(DeviceDType dtype, const void* q, const void* k_cache,
                             const void* v_cache, void* o, float* lse, const AttentionTile* tiles,
                             int tile_count, AttentionShape shape, CUstream_st* stream) {
  dispatch_tensor_core(dtype, shape.dim, [&](auto tag, auto dim) {
    launch_mma<decltype(tag), decltype(dim)::value>(q, k_cache, v_cache, o, lse, tiles, tile_count,
                                                    shape, stream);
  });
}

void launch_forward_simt(DeviceDType dtype, const void* q, const void* k_cache, const void* v_cache,
                         void* o, float* lse, const AttentionToken* tokens, int token_count,
                         AttentionShape shape, int kv_block, int splits, float* scratch,
                         CUstream_st* stream) {
  const std::int64_t items = static_cast<std::int64_t>(token_count) * shape.heads;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_simt_kernel<T><<<warp_grid(items * splits), simt_warps * warp_size, 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
        static_cast<T*>(o), lse, tokens, token_count, shape, kv_block, splits, scratch);
    BITCHECK_CUDA_LAUNCH_CHECK();
  });
}

std::int64_t attention_division_mismatches(std::int64_t pairs, std::uint64_t seed, bool naive) {
  DeviceBuffer counter(sizeof(unsigned long long));
  counter.fill_bytes(0);
  division_test_kernel<<<1024, 256>>>(pairs, seed, naive, counter.as<unsigned long long>());
  BITCHECK_CUDA_LAUNCH_CHECK();
  unsigned long long mismatches = 0;
  counter.download(&mismatches, sizeof(mismatches));
  return static_cast<std::int64_t>(mismatches);
}

}  // namespace bitcheck::cuda
