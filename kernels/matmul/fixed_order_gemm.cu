// matmul/fixed-order, the Hopper half: batch-invariant Y = X·Wᵀ on the wgmma + TMA path (its
// bf16/fp16 output, its unrounded fp32 output of one or several K-column blocks, and its subtree
// form, which adds a TP rank's chunk products in the fixed tree and stores the sum into other
// ranks' memory), the tile shape choice, and every public launcher of the forward. The portable
// fp32-FMA path and the token-sequential dW accumulation live in fixed_order_gemm_portable.cu.
//
// Why the reduction order is independent of batch size, row position and padding:
// - Path choice depends on (dtype, device) only. bf16/fp16 on sm_90 always take the wgmma path;
//   fp32 (no TF32, by contract) and other GPUs always take the portable path. M never picks a path.
// - wgmma path: every output element y[m,n] is computed by one consumer warpgroup as
//   acc = 0; for k-block kb = 0, 1, ... (64 wide, ascending): for kk = 0..3:
//   acc += the k16 products X[m, kb*64+16kk .. +16] * W[n, same] in one wgmma.m64nEk16 with an
//   fp32 accumulator, then one round-to-nearest-even to the output dtype. K block (64), operands
//   (both K-major from 128B-swizzled shared memory) and k order are compile-time constants; there
//   is no split-K and no atomic. M and N pick the tile shape and orientation (X as the wgmma A
//   operand with 64 to 192 rows by 64 to 256 columns, or W as A with 128 to 256 rows by 128 or
//   192 columns): which CTA computes an element, which operand slot its row of X rides in and how
//   many other outputs its instruction carries, never the chain of k16 steps that element goes
//   through. That the tensor cores give an element the same bits for every E and either operand
//   slot is measured, not documented: gemm_probe runs every shape on the same inputs and
//   compares all rows bitwise, and the sweeps cross the shape switch points. Rows past
//   M (and columns past N, and K past the end) are zero-filled by TMA and never stored, and a
//   zero row of X contributes to no other row: padding cannot leak into a real row.
// - portable path: acc = 0; acc = fmaf(x[m,k], w[n,k], acc) for k = 0..K-1 in order, per thread.
// - dW: dw[n,k] = fmaf(dy[t,n], x[t,k], dw[n,k]) for t = 0..T-1 in order, one thread per element;
//   the running value lives in dw between calls, so micro-batching the tokens changes nothing.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/async_copy.cuh"
#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/tensor_map.cuh"
#include "common/wgmma.cuh"
#include "fixed_order_gemm.h"
#include "fixed_order_gemm_internal.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BITCHECK_GEMM_SM90A 1
#endif

namespace bitcheck::cuda {

namespace fixed_order_internal {
void check_shape(const char* what, const void* a, const void* b, const void* c, int64_t M,
                 int64_t N, int64_t K) {
  const std::string name = what;
  if (M < 1 || N < 1 || K < 1) throw std::invalid_argument(name + ": M, N and K must be >= 1");
  if (N % 8 != 0 || K % 8 != 0)
    throw std::invalid_argument(name + ": N and K must be multiples of 8");
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    throw std::invalid_argument(name + ": dimensions must fit in int32");
  for (const void* p : {a, b, c}) {
    if (p == nullptr) throw std::invalid_argument(name + ": null pointer");
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(name + ": pointers must be 16-byte aligned");
  }
}
}  // namespace fixed_order_internal

using fixed_order_internal::as_stream;
using fixed_order_internal::check_shape;
using fixed_order_internal::launch_portable;

namespace {

// ------------------------------------------------------------------------------------------------
// Hopper path: persistent, warp-specialized (1 TMA producer warpgroup + 1 to 3 wgmma consumer
// warpgroups), 64-wide K blocks, multi-stage mbarrier pipeline. Each consumer warpgroup owns 64
// rows of one operand and runs m64nEk16 against E rows of the other (E = Extent: 64 to 256).
// - X as A (the classic orientation): the tile is 64 * Consumers rows of Y by E columns.
// - W as A: the tile is E rows of Y by 64 * Consumers columns; each consumer owns 64 columns and
//   its accumulator holds Yᵀ. E steps by 16, so the tile follows M closely (M = 1025 in 176-row
//   tiles wastes 31 rows, in 128-row tiles 127), which is what fills the last wave.
// The tile shape and orientation are scheduling choices, not arithmetic ones: see the header.
// ------------------------------------------------------------------------------------------------
constexpr int kTileK = 64;  // 64 bf16 = 128 bytes: one 128B swizzle row

template <int Consumers, int Extent, bool WAsA, int StackLevels = 0>
struct WgmmaConfig {
  static constexpr int kTileM = WAsA ? Extent : 64 * Consumers;  // rows of Y per tile
  static constexpr int kTileN = WAsA ? 64 * Consumers : Extent;  // columns of Y per tile
  static constexpr int kThreads = 128 * (Consumers + 1);
  // Stage layout: the A operand (64 rows per consumer), then the B operand (Extent rows).
  static constexpr int kStageBytesA = 64 * Consumers * kTileK * 2;
  static constexpr int kStageBytesB = Extent * kTileK * 2;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  // Each consumer's 64 x Extent accumulator block, staged for the TMA store 128B-swizzled like the
  // operands: X as A, Extent/64 boxes of 64 rows x 64 columns; W as A, one box of Extent rows x 64.
  // The subtree kernel (fp32 output, no staging) keeps StackLevels fp32 copies of it there instead.
  static constexpr int kEpilogueBytes =
      StackLevels > 0 ? StackLevels * 64 * Extent * 4 : 64 * Extent * 2;
  static constexpr int kFixedBytes = Consumers * kEpilogueBytes + 1024 /*alignment slack*/ + 256;
  // As many stages as fit beside the output blocks, at most 5 (one consumer) or 4 (more).
  static constexpr int kMaxStages = Consumers == 1 ? 5 : 4;
  static constexpr int kFitStages = (227 * 1024 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kFitStages < kMaxStages ? kFitStages : kMaxStages;
  static constexpr int kSharedBytes = kStages * kStageBytes + kFixedBytes;
  static_assert(Extent % 16 == 0 && Extent >= 64 && Extent <= 256, "wgmma N");
  static_assert(WAsA || Extent % 64 == 0, "X as A stores 64-column boxes");
  static_assert(kStages >= 3, "at least three pipeline stages");
  static_assert(kSharedBytes <= 227 * 1024, "shared memory per block");
};

// Where the subtree kernel stores its sum: element e in part[e / part_elements] at
// e % part_elements, parts of another rank's memory (or one local part).
struct SubtreeParts {
  float* part[8];
  long long part_elements;
  int count;  // the parts the M x N sum reaches
};

#ifdef BITCHECK_GEMM_SM90A
constexpr int kOutputBoxBytes = 64 * 64 * 2;  // one 64 x 64 box of the output, as TMA stores it

struct TileCoord {
  int m;
  int n;
};

// Grouped raster over the (tiles_m x tiles_n) grid of output tiles.
__device__ __forceinline__ TileCoord tile_coord(int tile, int tiles_m, int tiles_n) {
  constexpr int kGroupM = 8;  // 8 M-tiles share each sweep over N, for L2 reuse
  const int tiles_per_group = kGroupM * tiles_n;
  const int group = tile / tiles_per_group;
  const int first_m = group * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  const int in_group = tile % tiles_per_group;
  return {first_m + in_group % group_rows, in_group / group_rows};
}

// The subtree kernel's tiles: the row tiles of its parts interleaved, virtual row tile v being row
// tile (v % parts) * per_part + v / parts (per_part = ceil(tiles_m / parts)), so that each wave
// stores into every part at once and the links to the other ranks carry the stores through the
// whole kernel, not one rank's after another's. Virtual row tiles past the last are skipped
// (m = -1). The order of tiles changes no bit.
__device__ __forceinline__ TileCoord subtree_tile(int tile, int tiles_m, int tiles_n, int parts) {
  const int per_part = (tiles_m + parts - 1) / parts;
  TileCoord coord = tile_coord(tile, per_part * parts, tiles_n);
  const int m = (coord.m % parts) * per_part + coord.m / parts;
  coord.m = m < tiles_m ? m : -1;
  return coord;
}

using async_copy::mbar_arrive;
using async_copy::mbar_expect_tx;
using async_copy::mbar_init;
using async_copy::mbar_wait;
using async_copy::smem_addr;
using async_copy::tma_load_2d;

// wgmma shared-memory matrix descriptor: K-major, 128B swizzle, 8-row core groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* pointer) {
  return wgmma::descriptor(smem_addr(pointer), 16 /*unused for swizzled K-major*/, 1024);
}

// Two fp32 accumulators rounded once (round-to-nearest-even) to the output dtype.
__device__ __forceinline__ void store_pair(__nv_bfloat16* y, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(y) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half* y, float a, float b) {
  *reinterpret_cast<__half2*>(y) = __floats2half2_rn(a, b);
}
// The same rounding, packed in a register (a in the low half) for stmatrix.
template <typename T>
__device__ __forceinline__ uint32_t packed_pair(float a, float b) {
  T pair[2];
  store_pair(pair, a, b);
  uint32_t bits;
  memcpy(&bits, pair, sizeof bits);
  return bits;
}
// Four 8x8 b16 fragments (m16n8 accumulator layout: lane holds row lane/4, columns 2*(lane%4)
// and +1), each stored transposed: row j of fragment q's stored matrix is its column j, written
// as 16 contiguous bytes at the address lane 8q + j gives.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t address, uint32_t r0, uint32_t r1,
                                                  uint32_t r2, uint32_t r3) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
      "r"(r0), "r"(r1), "r"(r2), "r"(r3)
      : "memory");
}
using async_copy::bulk_commit_group;
using async_copy::bulk_wait_group;
using async_copy::bulk_wait_group_read;
using async_copy::named_barrier_sync;
using async_copy::tma_store_2d;
#endif  // BITCHECK_GEMM_SM90A

#ifdef BITCHECK_GEMM_SM90A
// A consumer's passes over `blocks` K blocks of the pipeline without wgmmas (its rows or columns
// lie past the edge): the handshake only.
template <int kStages>
__device__ __forceinline__ void skip_k_blocks(uint64_t* full, uint64_t* empty, int lane, int blocks,
                                              int& stage, uint32_t& phase) {
  for (int kb = 0; kb < blocks; ++kb) {
    mbar_wait(&full[stage], phase);
    if (lane == 0) mbar_arrive(&empty[stage]);
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
}

// One product's K blocks from the pipeline into acc, zeroed first: every element's chain of k16
// steps, K blocks in ascending order.
template <typename T, int Extent, int kStages, int kStageBytesA, int kStageBytesB>
__device__ __forceinline__ void consume_k_blocks(float (&acc)[Extent / 2],
                                                 const unsigned char* tiles_a,
                                                 const unsigned char* tiles_b, uint64_t* full,
                                                 uint64_t* empty, int consumer, int lane,
                                                 int k_blocks, int& stage, uint32_t& phase) {
#pragma unroll
  for (int i = 0; i < Extent / 2; ++i) acc[i] = 0.0f;
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    mbar_wait(&full[stage], phase);
    const unsigned char* a = tiles_a + stage * kStageBytesA + consumer * (64 * kTileK * 2);
    const unsigned char* b = tiles_b + stage * kStageBytesB;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      wgmma::ss_m64k16<T, Extent>(acc, smem_desc(a + kk * 32), smem_desc(b + kk * 32), 1);
    }
    wgmma::commit();
    // Keep this block's wgmmas in flight; the previous block's are done, release its stage.
    wgmma::wait<1>();
    if (previous_stage >= 0 && lane == 0) mbar_arrive(&empty[previous_stage]);
    previous_stage = stage;
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  wgmma::wait<0>();
  if (previous_stage >= 0 && lane == 0) mbar_arrive(&empty[previous_stage]);
}
#endif  // BITCHECK_GEMM_SM90A

// FloatOut (X as A only): the fp32 accumulators are stored unrounded to y_float ([M, N], row-major)
// straight from the registers, without the shared block and TMA store; the arithmetic is the same,
// so rounding y_float to T gives the bits the T kernel stores. It also runs `chunks` GEMMs in one
// launch: product c reads columns [c * K, c * K + K) of X and W (K a multiple of 64, so no K block
// crosses into the next product) and goes to y_float + c * M * N; each is the chain of one launch
// on those columns alone. The T kernel runs one (chunks = 1).
// Leaves > 0 (FloatOut only; 1, 2 or 4): the subtree kernel. Each tile runs the Leaves products
// one after another, each the chain of its own launch, and adds them in the fixed binary tree of
// common/rank_tree.cuh, ((p0 + p1) + (p2 + p3)) in fp32: p0 held in registers, p0 + p1 of four in
// the thread's own slots of the shared block. Element e of the [M, N] sum is stored unrounded to
// parts.part[e / part_elements] + e % part_elements: another rank's staging over peer memory
// (common/peer_sum.h), written from the accumulators with no pass over fp32 leaves.
template <typename T, int Consumers, int Extent, bool WAsA, bool FloatOut = false, int Leaves = 0>
__global__ void __launch_bounds__(WgmmaConfig<Consumers, Extent, WAsA>::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap w_map,
                      const __grid_constant__ CUtensorMap y_map, float* y_float, int M, int N,
                      int K, int chunks, const __grid_constant__ SubtreeParts parts) {
  static_assert(!(FloatOut && WAsA), "the fp32 output is stored from X-as-A accumulators");
  static_assert(Leaves == 0 || (FloatOut && (Leaves == 1 || Leaves == 2 || Leaves == 4)),
                "the subtree kernel adds 1, 2 or 4 fp32 products");
#ifdef BITCHECK_GEMM_SM90A
  using Config = WgmmaConfig<Consumers, Extent, WAsA, Leaves == 4 ? 1 : 0>;
  constexpr int kTileM = Config::kTileM;
  constexpr int kTileN = Config::kTileN;
  constexpr int kStages = Config::kStages;
  constexpr int kStageBytesA = Config::kStageBytesA;
  constexpr int kStageBytesB = Config::kStageBytesB;
  constexpr int kStageBytes = Config::kStageBytes;
  extern __shared__ unsigned char shared_raw[];
  // 128B-swizzled TMA tiles and wgmma descriptors assume 1024-byte aligned tiles.
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* tiles_a = shared;
  unsigned char* tiles_b = shared + kStages * kStageBytesA;
  unsigned char* output = shared + kStages * kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(output + Consumers * Config::kEpilogueBytes);
  uint64_t* empty = full + kStages;
  // Where the X and W tiles of a stage land: X is the A operand unless W is.
  unsigned char* tiles_x = WAsA ? tiles_b : tiles_a;
  unsigned char* tiles_w = WAsA ? tiles_a : tiles_b;
  constexpr int kStageBytesX = WAsA ? kStageBytesB : kStageBytesA;
  constexpr int kStageBytesW = WAsA ? kStageBytesA : kStageBytesB;
  // Products run one after another per tile (the subtree kernel) or as tiles of their own.
  constexpr bool kChunkTiles = FloatOut && Leaves == 0;
  constexpr int kLeavesPerTile = Leaves > 0 ? Leaves : 1;

  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (M + kTileM - 1) / kTileM;
  const int tiles_n = (N + kTileN - 1) / kTileN;
  const int tiles_per_chunk = tiles_m * tiles_n;
  const int tile_count = Leaves > 0
                             ? (tiles_m + parts.count - 1) / parts.count * parts.count * tiles_n
                             : tiles_per_chunk * (kChunkTiles ? chunks : 1);
  const int k_blocks = (K + kTileK - 1) / kTileK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * Consumers);  // one arrival per consumer warp
    }
    async_copy::mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer: one thread issues all TMA loads
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
      const int chunk = kChunkTiles ? tile / tiles_per_chunk : 0;
      const TileCoord coord = Leaves > 0
                                  ? subtree_tile(tile, tiles_m, tiles_n, parts.count)
                                  : tile_coord(tile - chunk * tiles_per_chunk, tiles_m, tiles_n);
      if (coord.m < 0) continue;
      for (int leaf = 0; leaf < kLeavesPerTile; ++leaf) {
        for (int kb = 0; kb < k_blocks; ++kb) {
          mbar_wait(&empty[stage], phase ^ 1);
          mbar_expect_tx(&full[stage], kStageBytes);
          const int column = (chunk + leaf) * K + kb * kTileK;
          tma_load_2d(tiles_x + stage * kStageBytesX, &x_map, &full[stage], column,
                      coord.m * kTileM);
          tma_load_2d(tiles_w + stage * kStageBytesW, &w_map, &full[stage], column,
                      coord.n * kTileN);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
    return;
  }

  // Consumers: warpgroup 1 + c owns A-operand rows 64c..64c+63 of the tile (rows of Y for X as A,
  // columns of Y for W as A).
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  int stage = 0;
  uint32_t phase = 0;
  float acc[Extent / 2];
  if constexpr (Leaves > 0) {
    float held[Extent / 2];
    // This thread's slots of the shared block: float4 q of its accumulators at q * 128.
    float4* stack =
        reinterpret_cast<float4*>(output + consumer * Config::kEpilogueBytes) + threadIdx.x % 128;
    for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
      const TileCoord coord = subtree_tile(tile, tiles_m, tiles_n, parts.count);
      if (coord.m < 0) continue;
      const int first_row = coord.m * kTileM + consumer * 64;
      const int first_col = coord.n * kTileN;
      if (first_row >= M || first_col >= N) {
        skip_k_blocks<kStages>(full, empty, lane, k_blocks * Leaves, stage, phase);
        continue;
      }
#pragma unroll
      for (int leaf = 0; leaf < Leaves; ++leaf) {
        consume_k_blocks<T, Extent, kStages, kStageBytesA, kStageBytesB>(
            acc, tiles_a, tiles_b, full, empty, consumer, lane, k_blocks, stage, phase);
        if (leaf % 2 == 0) {
          if (leaf + 1 < Leaves) {
#pragma unroll
            for (int i = 0; i < Extent / 2; ++i) held[i] = acc[i];
          }
          continue;
        }
#pragma unroll
        for (int i = 0; i < Extent / 2; ++i) acc[i] = held[i] + acc[i];
        if (leaf == 1 && Leaves == 4) {
#pragma unroll
          for (int q = 0; q < Extent / 8; ++q)
            stack[q * 128] =
                make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        } else if (leaf == 3) {
#pragma unroll
          for (int q = 0; q < Extent / 8; ++q) {
            const float4 low = stack[q * 128];
            acc[4 * q] = low.x + acc[4 * q];
            acc[4 * q + 1] = low.y + acc[4 * q + 1];
            acc[4 * q + 2] = low.z + acc[4 * q + 2];
            acc[4 * q + 3] = low.w + acc[4 * q + 3];
          }
        }
      }
      // Accumulator register 4c+2i+j: row 16*warp + lane/4 + 8i, column 8c + 2*(lane%4) + j. The
      // columns of a row go up by 8, so they cross at most one part's end (part_elements >= 256).
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = first_row + warp_in_group * 16 + lane / 4 + 8 * i;
        if (row >= M) continue;
        const long long start = static_cast<long long>(row) * N + first_col + 2 * (lane % 4);
        int part = static_cast<int>(start / parts.part_elements);
        long long part_first = part * parts.part_elements;
#pragma unroll
        for (int c = 0; c < Extent / 8; ++c) {
          if (first_col + 8 * c + 2 * (lane % 4) >= N) break;
          const long long e = start + 8 * c;
          if (e >= part_first + parts.part_elements) {
            ++part;
            part_first += parts.part_elements;
          }
          *reinterpret_cast<float2*>(parts.part[part] + (e - part_first)) =
              make_float2(acc[4 * c + 2 * i], acc[4 * c + 2 * i + 1]);
        }
      }
    }
    __threadfence_system();  // the stores into other ranks' memory, performed before the kernel
                             // ends
  } else {
    for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
      const int chunk = kChunkTiles ? tile / tiles_per_chunk : 0;
      const TileCoord coord = tile_coord(tile - chunk * tiles_per_chunk, tiles_m, tiles_n);
      // A consumer whose 64 rows (X as A) or columns (W as A) lie wholly past the edge has nothing
      // to store; it skips the wgmmas but keeps the pipeline's handshake.
      const int first_row = coord.m * kTileM + (WAsA ? 0 : consumer * 64);
      const int first_col = coord.n * kTileN + (WAsA ? consumer * 64 : 0);
      if (first_row >= M || first_col >= N) {
        // Kept apart from the main loop: a branch around the wgmmas there makes ptxas serialize
        // them.
        skip_k_blocks<kStages>(full, empty, lane, k_blocks, stage, phase);
        continue;
      }
      consume_k_blocks<T, Extent, kStages, kStageBytesA, kStageBytesB>(
          acc, tiles_a, tiles_b, full, empty, consumer, lane, k_blocks, stage, phase);

      if constexpr (FloatOut) {
        // Accumulator register 4c+2i+j: row 16*warp + lane/4 + 8i, column 8c + 2*(lane%4) + j; a
        // pair of columns is both in or both out (N is a multiple of 8).
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = first_row + warp_in_group * 16 + lane / 4 + 8 * i;
          if (row >= M) continue;
          float* y_row = y_float + (static_cast<int64_t>(chunk) * M + row) * N;
#pragma unroll
          for (int c = 0; c < Extent / 8; ++c) {
            const int col = first_col + 8 * c + 2 * (lane % 4);
            if (col < N)
              *reinterpret_cast<float2*>(y_row + col) =
                  make_float2(acc[4 * c + 2 * i], acc[4 * c + 2 * i + 1]);
          }
        }
        continue;
      }
      // Epilogue: the consumer's block goes through its shared output block to TMA stores, which
      // clip rows past M and columns past N; the next tile's wgmmas start while the store drains.
      // Accumulator layout of m64nEk16: register 4c+2i+j holds A-row 16*warp + lane/4 + 8i, B-row
      // 8c + 2*(lane%4) + j. In a 128B-swizzled box the 16-byte chunk of 8 columns c%8 of row r
      // sits at chunk (c%8) ^ (r%8), so a warp's 8 rows hit 8 different bank groups.
      unsigned char* block = output + consumer * Config::kEpilogueBytes;
      const bool leader = threadIdx.x % 128 == 0;
      if (leader) bulk_wait_group_read<0>();  // the previous tile's store has read the block
      named_barrier_sync(1 + consumer, 128);
      if constexpr (WAsA) {
        // Yᵀ in registers: the 8x8 fragment (c, i) is columns 16*warp + 8i + 0..7 of Y by rows
        // 8c + 0..7. Stored transposed, its row j is Y's row 8c + j, columns 16*warp + 8i + 0..7:
        // chunk 2*warp + i of box row 8c + j. Lane 8q + j addresses row j of fragment q, with
        // q = 0..3 the fragments (c, 0), (c, 1), (c+1, 0), (c+1, 1).
        const int q = lane / 8, j = lane % 8;
#pragma unroll
        for (int c = 0; c < Extent / 8; c += 2) {
          const int row = 8 * (c + q / 2) + j;
          const uint32_t address =
              smem_addr(block + row * 128 + (((2 * warp_in_group + q % 2) ^ j) * 16));
          stmatrix_x4_trans(address, packed_pair<T>(acc[4 * c], acc[4 * c + 1]),
                            packed_pair<T>(acc[4 * c + 2], acc[4 * c + 3]),
                            packed_pair<T>(acc[4 * c + 4], acc[4 * c + 5]),
                            packed_pair<T>(acc[4 * c + 6], acc[4 * c + 7]));
        }
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = warp_in_group * 16 + lane / 4 + 8 * i;
#pragma unroll
          for (int c = 0; c < Extent / 8; ++c) {
            unsigned char* chunk = block + (c / 8) * kOutputBoxBytes + row * 128 +
                                   (((c % 8) ^ (row % 8)) * 16) + (lane % 4) * 4;
            store_pair(reinterpret_cast<T*>(chunk), acc[4 * c + 2 * i], acc[4 * c + 2 * i + 1]);
          }
        }
      }
      async_copy::fence_proxy_async_shared();  // the writes above, before the copy engine reads
      named_barrier_sync(1 + consumer, 128);
      if (leader) {
        if constexpr (WAsA) {
          tma_store_2d(&y_map, block, first_col, first_row);  // Extent rows x 64 columns
        } else {
#pragma unroll
          for (int box = 0; box < Extent / 64; ++box) {
            if (first_col + box * 64 < N)
              tma_store_2d(&y_map, block + box * kOutputBoxBytes, first_col + box * 64, first_row);
          }
        }
        bulk_commit_group();
      }
    }
  }
  if (threadIdx.x % 128 == 0) bulk_wait_group<0>();  // stores complete before the CTA exits
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// ------------------------------------------------------------------------------------------------
// Host side.
// ------------------------------------------------------------------------------------------------
struct DeviceTraits {
  bool hopper = false;
  int sm_count = 0;
};

const DeviceTraits& current_device_traits() {
  // Cached per process for device 0..15; the path must not flip between calls on one device.
  static DeviceTraits traits[16];
  static bool known[16] = {};
  static std::mutex mutex;
  int device = 0;
  BITCHECK_CUDA_CALL(cudaGetDevice(&device));
  if (device < 0 || device >= 16) throw std::runtime_error("fixed_order_gemm: device index >= 16");
  std::lock_guard<std::mutex> lock(mutex);
  if (!known[device]) {
    cudaDeviceProp prop{};
    BITCHECK_CUDA_CALL(cudaGetDeviceProperties(&prop, device));
    traits[device].hopper = prop.major == 9 && prop.minor == 0;
    traits[device].sm_count = prop.multiProcessorCount;
    known[device] = true;
  }
  return traits[device];
}

// Sentinel proof of full writes (BITCHECK_SENTINEL_WRITES=1, set by scripts/gpu-sanitize.sh for
// initcheck). The wgmma path writes Y with TMA stores alone, which compute-sanitizer's initcheck
// does not record: every later read of Y (a download, the next kernel) looks uninitialized. In
// this mode Y is first filled with a sentinel by cudaMemsetAsync (which initcheck records), and
// after the kernel a counting kernel proves that no element of Y still holds it; a launch that
// leaves any element unwritten throws, so the case ends in `error`. The sentinel is all-ones bits,
// a negative NaN of payload 0x7F (bf16/fp16: 0xFFFF), which no finite product of finite inputs
// gives, and which a NaN produced by arithmetic on the GPU (canonical 0x7FFF) is not.
bool sentinel_writes_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("BITCHECK_SENTINEL_WRITES");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

__global__ void count_sentinel_kernel(const std::uint16_t* y, std::int64_t count,
                                      unsigned long long* found) {
  unsigned long long local = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    local += y[i] == 0xFFFFu;
  if (local != 0) atomicAdd(found, local);
}

__device__ unsigned long long sentinel_found;

std::uint64_t count_sentinel(const void* y, std::int64_t elements, cudaStream_t stream) {
  unsigned long long* found = nullptr;
  BITCHECK_CUDA_CALL(cudaGetSymbolAddress(reinterpret_cast<void**>(&found), sentinel_found));
  BITCHECK_CUDA_CALL(cudaMemsetAsync(found, 0, sizeof(*found), stream));
  const std::int64_t blocks = std::min<std::int64_t>((elements + 255) / 256, 1024);
  count_sentinel_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<const std::uint16_t*>(y), elements, found);
  BITCHECK_CUDA_LAUNCH_CHECK();
  unsigned long long host = 0;
  BITCHECK_CUDA_CALL(cudaMemcpyAsync(&host, found, sizeof(host), cudaMemcpyDeviceToHost, stream));
  BITCHECK_CUDA_CALL(cudaStreamSynchronize(stream));
  return host;
}

template <typename T, int Consumers, int Extent, bool WAsA>
void launch_wgmma(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K,
                  cudaStream_t stream, int sm_count) {
  using Config = WgmmaConfig<Consumers, Extent, WAsA>;
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMap x_map = make_tensor_map(type, x, M, K, Config::kTileM);
  const CUtensorMap w_map = make_tensor_map(type, w, N, K, Config::kTileN);
  // Output boxes: 64 x 64 (X as A) or Extent rows x 64 (W as A).
  const CUtensorMap y_map = make_tensor_map(type, y, M, N, WAsA ? Extent : 64);
  // Per call, not cached: the attribute belongs to the current device.
  BITCHECK_CUDA_CALL(cudaFuncSetAttribute(wgmma_gemm_kernel<T, Consumers, Extent, WAsA>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          Config::kSharedBytes));
  const int64_t tiles =
      ((M + Config::kTileM - 1) / Config::kTileM) * ((N + Config::kTileN - 1) / Config::kTileN);
  const int grid = static_cast<int>(tiles < sm_count ? tiles : sm_count);
  const bool sentinel = sentinel_writes_enabled();
  if (sentinel) BITCHECK_CUDA_CALL(cudaMemsetAsync(y, 0xFF, M * N * sizeof(T), stream));
  wgmma_gemm_kernel<T, Consumers, Extent, WAsA>
      <<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(
          x_map, w_map, y_map, nullptr, static_cast<int>(M), static_cast<int>(N),
          static_cast<int>(K), 1, SubtreeParts{});
  BITCHECK_CUDA_LAUNCH_CHECK();
  if (!sentinel) return;
  const std::uint64_t unwritten = count_sentinel(y, M * N, stream);
  if (unwritten != 0)
    throw std::runtime_error("fixed_order_gemm: the wgmma tile " + std::to_string(Config::kTileM) +
                             "x" + std::to_string(Config::kTileN) + (WAsA ? " W-as-A" : "") +
                             " left " + std::to_string(unwritten) + " of " + std::to_string(M * N) +
                             " elements of Y (M = " + std::to_string(M) +
                             ", N = " + std::to_string(N) +
                             ") unwritten (sentinel check, BITCHECK_SENTINEL_WRITES)");
}

using WgmmaLauncher = void (*)(const void*, const void*, void*, int64_t, int64_t, int64_t,
                               cudaStream_t, int);

// The fp32-output kernel of an X-as-A shape, on X and W whose rows lie ldx and ldw elements apart:
// `chunks` products of K columns each (chunks > 1: K a multiple of 64).
template <typename T, int Consumers, int Extent>
void launch_wgmma_float(const void* x, int64_t ldx, const void* w, int64_t ldw, float* y, int64_t M,
                        int64_t N, int64_t K, int chunks, cudaStream_t stream, int sm_count) {
  using Config = WgmmaConfig<Consumers, Extent, false>;
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMap x_map = make_tensor_map(type, x, M, K * chunks, Config::kTileM, ldx);
  const CUtensorMap w_map = make_tensor_map(type, w, N, K * chunks, Config::kTileN, ldw);
  BITCHECK_CUDA_CALL(cudaFuncSetAttribute(wgmma_gemm_kernel<T, Consumers, Extent, false, true>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          Config::kSharedBytes));
  const int64_t tiles = ((M + Config::kTileM - 1) / Config::kTileM) *
                        ((N + Config::kTileN - 1) / Config::kTileN) * chunks;
  const int grid = static_cast<int>(tiles < sm_count ? tiles : sm_count);
  // y_map is not read by the fp32-output kernel; x_map stands in for it.
  wgmma_gemm_kernel<T, Consumers, Extent, false, true>
      <<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(
          x_map, w_map, x_map, y, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
          chunks, SubtreeParts{});
  BITCHECK_CUDA_LAUNCH_CHECK();
}

using WgmmaFloatLauncher = void (*)(const void*, int64_t, const void*, int64_t, float*, int64_t,
                                    int64_t, int64_t, int, cudaStream_t, int);

// The subtree kernel of an X-as-A shape: `Leaves` products of K columns each (K a multiple of 64),
// their fixed tree stored into `parts`.
template <typename T, int Consumers, int Extent, int Leaves>
void launch_wgmma_subtree_of(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t M,
                             int64_t N, int64_t K, const SubtreeParts& parts, cudaStream_t stream,
                             int sm_count) {
  using Config = WgmmaConfig<Consumers, Extent, false, Leaves == 4 ? 1 : 0>;
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMap x_map = make_tensor_map(type, x, M, K * Leaves, Config::kTileM, ldx);
  const CUtensorMap w_map = make_tensor_map(type, w, N, K * Leaves, Config::kTileN, ldw);
  BITCHECK_CUDA_CALL(
      cudaFuncSetAttribute(wgmma_gemm_kernel<T, Consumers, Extent, false, true, Leaves>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSharedBytes));
  const int64_t tiles_m = (M + Config::kTileM - 1) / Config::kTileM;
  const int64_t tiles = (tiles_m + parts.count - 1) / parts.count * parts.count *
                        ((N + Config::kTileN - 1) / Config::kTileN);
  const int grid = static_cast<int>(tiles < sm_count ? tiles : sm_count);
  wgmma_gemm_kernel<T, Consumers, Extent, false, true, Leaves>
      <<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(
          x_map, w_map, x_map, nullptr, static_cast<int>(M), static_cast<int>(N),
          static_cast<int>(K), Leaves, parts);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

template <typename T, int Consumers, int Extent>
void launch_wgmma_subtree(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t M,
                          int64_t N, int64_t K, int leaves, const SubtreeParts& parts,
                          cudaStream_t stream, int sm_count) {
  switch (leaves) {
    case 1:
      return launch_wgmma_subtree_of<T, Consumers, Extent, 1>(x, ldx, w, ldw, M, N, K, parts,
                                                              stream, sm_count);
    case 2:
      return launch_wgmma_subtree_of<T, Consumers, Extent, 2>(x, ldx, w, ldw, M, N, K, parts,
                                                              stream, sm_count);
    default:
      return launch_wgmma_subtree_of<T, Consumers, Extent, 4>(x, ldx, w, ldw, M, N, K, parts,
                                                              stream, sm_count);
  }
}

using WgmmaSubtreeLauncher = void (*)(const void*, int64_t, const void*, int64_t, int64_t, int64_t,
                                      int64_t, int, const SubtreeParts&, cudaStream_t, int);

// Every kernel shape of the wgmma path, and the relative time of one wave of it (one tile per SM)
// against a wave of 128x256 tiles; the costs are used only to pick the shape, which changes no
// bit: every shape runs the same per-element chain (m64nNk16 over K blocks of 64 in order;
// gemm_probe checks all shapes, both orientations, bitwise against each other).
// Costs: the mean time per full wave over the five benchmark shapes at M = 1000 to 4097 in
// `gemm_probe --tiles` on an H200 (reports/gpu/gemm-tile-shapes.md), except 64x64 and 64x128,
// which keep 0.35 (they are picked at small M, where a wave is a memory-bound pass over W). With
// these costs the pick is on that table within 1.2 % of the fastest shape on geometric mean and
// at worst 8.5 % (M = 64, where 64x64 is faster than the 64x128 picked). The 3-consumer W-as-A
// tiles pay for their width: 176x192 costs 1.06 for 1.03 of the work.
// X-as-A shapes also have an fp32-output kernel (bf16_float, fp16_float; null for W as A), and the
// 128-column ones a subtree kernel (two accumulator blocks in registers; a 64-column tile is never
// fewer waves than a 128-column one of the same cost).
struct KernelShape {
  detail::GemmTile tile;
  double wave_cost;
  WgmmaLauncher bf16, fp16;
  WgmmaFloatLauncher bf16_float = nullptr, fp16_float = nullptr;
  WgmmaSubtreeLauncher bf16_subtree = nullptr, fp16_subtree = nullptr;
};

template <int Consumers, int Extent, bool WAsA>
constexpr KernelShape kernel_shape(double wave_cost) {
  KernelShape shape{{WAsA ? Extent : 64 * Consumers, WAsA ? 64 * Consumers : Extent, WAsA},
                    wave_cost,
                    &launch_wgmma<__nv_bfloat16, Consumers, Extent, WAsA>,
                    &launch_wgmma<__half, Consumers, Extent, WAsA>};
  if constexpr (!WAsA) {
    shape.bf16_float = &launch_wgmma_float<__nv_bfloat16, Consumers, Extent>;
    shape.fp16_float = &launch_wgmma_float<__half, Consumers, Extent>;
  }
  return shape;
}

template <int Consumers, int Extent>
constexpr KernelShape with_subtree(KernelShape shape) {
  static_assert(Extent <= 128, "the subtree kernel holds two accumulator blocks in registers");
  shape.bf16_subtree = &launch_wgmma_subtree<__nv_bfloat16, Consumers, Extent>;
  shape.fp16_subtree = &launch_wgmma_subtree<__half, Consumers, Extent>;
  return shape;
}

const KernelShape kKernelShapes[] = {
    // X as A: 64 * Consumers rows x Extent columns.
    kernel_shape<2, 256, false>(1.0),
    kernel_shape<2, 192, false>(0.770),
    kernel_shape<1, 256, false>(0.549),
    with_subtree<2, 128>(kernel_shape<2, 128, false>(0.558)),
    with_subtree<1, 128>(kernel_shape<1, 128, false>(0.35)),
    kernel_shape<1, 64, false>(0.35),
    kernel_shape<1, 192, false>(0.427),
    kernel_shape<2, 64, false>(0.476),
    // W as A: Extent rows x 64 * Consumers columns.
    kernel_shape<2, 128, true>(0.544),
    kernel_shape<2, 144, true>(0.571),
    kernel_shape<2, 160, true>(0.626),
    kernel_shape<2, 176, true>(0.692),
    kernel_shape<2, 192, true>(0.754),
    kernel_shape<2, 208, true>(0.820),
    kernel_shape<2, 224, true>(0.916),
    kernel_shape<2, 256, true>(1.034),
    kernel_shape<3, 128, true>(0.775),
    kernel_shape<3, 144, true>(0.846),
    kernel_shape<3, 160, true>(1.004),
    kernel_shape<3, 176, true>(1.057),
    kernel_shape<3, 192, true>(1.143),
};

// The shape with the fewest estimated wave-times for this launch (the earlier one on a tie, so
// X as A and larger tiles win ties); float_out: among the shapes with an fp32-output kernel;
// subtree: among those with a subtree kernel.
const KernelShape& choose_shape(int64_t M, int64_t N, int sm_count, bool float_out = false,
                                bool subtree = false) {
  const KernelShape* best = nullptr;
  double best_cost = -1;
  for (const KernelShape& shape : kKernelShapes) {
    if (float_out && shape.bf16_float == nullptr) continue;
    if (subtree && shape.bf16_subtree == nullptr) continue;
    const int64_t tiles =
        (M + shape.tile.rows - 1) / shape.tile.rows * ((N + shape.tile.cols - 1) / shape.tile.cols);
    const double cost = double((tiles + sm_count - 1) / sm_count) * shape.wave_cost;
    if (best_cost < 0 || cost < best_cost) {
      best = &shape;
      best_cost = cost;
    }
  }
  return *best;
}

const KernelShape* find_shape(const detail::GemmTile& tile) {
  for (const KernelShape& shape : kKernelShapes)
    if (shape.tile.rows == tile.rows && shape.tile.cols == tile.cols &&
        shape.tile.w_as_a == tile.w_as_a)
      return &shape;
  return nullptr;
}

void launch_shape(const KernelShape& shape, GemmDType dtype, const void* x, const void* w, void* y,
                  int64_t M, int64_t N, int64_t K, cudaStream_t stream, int sm_count) {
  (dtype == GemmDType::bf16 ? shape.bf16 : shape.fp16)(x, w, y, M, N, K, stream, sm_count);
}

bool uses_wgmma(GemmDType dtype) {
  return dtype != GemmDType::fp32 && current_device_traits().hopper;
}

}  // namespace

namespace {
// "tile.X-as-A.128x256", "tile.W-as-A.176x192".
std::string tile_path(const detail::GemmTile& tile) {
  return std::string("tile.") + (tile.w_as_a ? "W-as-A." : "X-as-A.") + std::to_string(tile.rows) +
         "x" + std::to_string(tile.cols);
}

// Tiles no (M, N) makes choose_shape pick (M up to 16384, N up to 65536 in steps of 8, on 78, 114
// and 132 SMs): reached only by forcing.
bool never_picked(const detail::GemmTile& tile) {
  return (!tile.w_as_a && tile.rows == 128 && tile.cols == 128) ||
         (!tile.w_as_a && tile.rows == 64 && tile.cols == 64) ||
         (tile.w_as_a && tile.rows == 128 && tile.cols == 192);
}
}  // namespace

const char* fixed_order_gemm_path(GemmDType dtype) {
  return uses_wgmma(dtype) ? "wgmma-tma-m64nNk16" : "portable-fma";
}

void fixed_order_gemm(GemmDType dtype, const void* x, const void* w, void* y, int64_t M, int64_t N,
                      int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm", x, w, y, M, N, K);
  const cudaStream_t s = as_stream(stream);
  if (uses_wgmma(dtype)) {
    const int sm_count = current_device_traits().sm_count;
    const KernelShape& shape = choose_shape(M, N, sm_count);
    record_path(tile_path(shape.tile));
    launch_shape(shape, dtype, x, w, y, M, N, K, s, sm_count);
    return;
  }
  record_path("portable-fma");
  detail::fixed_order_gemm_portable(dtype, x, w, y, M, N, K, stream);
}

void fixed_order_gemm_fp32_out(GemmDType dtype, const void* x, int64_t ldx, const void* w,
                               int64_t ldw, float* y, int64_t M, int64_t N, int64_t K,
                               CUstream_st* stream, int chunks) {
  check_shape("fixed_order_gemm_fp32_out", x, w, y, M, N, K);
  if (chunks < 1 || chunks > 64)
    throw std::invalid_argument("fixed_order_gemm_fp32_out: chunks must be 1 to 64");
  if (ldx < K * chunks || ldw < K * chunks || ldx % 8 != 0 || ldw % 8 != 0)
    throw std::invalid_argument(
        "fixed_order_gemm_fp32_out: row strides must be multiples of 8 and at least K * chunks");
  const cudaStream_t s = as_stream(stream);
  const std::size_t element = dtype == GemmDType::fp32 ? 4 : 2;
  auto shifted = [&](const void* base, int c) {
    return static_cast<const unsigned char*>(base) + static_cast<std::size_t>(c * K) * element;
  };
  if (uses_wgmma(dtype)) {
    const int sm_count = current_device_traits().sm_count;
    const KernelShape& shape = choose_shape(M, N, sm_count, true);
    record_path(tile_path(shape.tile));
    const WgmmaFloatLauncher launch =
        dtype == GemmDType::bf16 ? shape.bf16_float : shape.fp16_float;
    if (K % kTileK == 0) return launch(x, ldx, w, ldw, y, M, N, K, chunks, s, sm_count);
    // A K block would reach into the next product's columns: one launch each, whose maps end at
    // their own last column.
    for (int c = 0; c < chunks; ++c)
      launch(shifted(x, c), ldx, shifted(w, c), ldw, y + static_cast<std::size_t>(c * M * N), M, N,
             K, 1, s, sm_count);
    return;
  }
  record_path("portable-fma");
  for (int c = 0; c < chunks; ++c)
    launch_portable(dtype, shifted(x, c), ldx, shifted(w, c), ldw,
                    y + static_cast<std::size_t>(c * M * N), true, M, N, K, s);
}

bool fixed_order_gemm_fp32_subtree(GemmDType dtype, const void* x, int64_t ldx, const void* w,
                                   int64_t ldw, int64_t M, int64_t N, int64_t K, int chunks,
                                   const std::vector<float*>& parts, int64_t part_elements,
                                   CUstream_st* stream) {
  const std::string name = "fixed_order_gemm_fp32_subtree";
  if (parts.empty() || parts.size() > 8)
    throw std::invalid_argument(name + ": 1 to 8 parts, not " + std::to_string(parts.size()));
  check_shape(name.c_str(), x, w, parts[0], M, N, K);
  if (chunks != 1 && chunks != 2 && chunks != 4)
    throw std::invalid_argument(name + ": chunks must be 1, 2 or 4");
  if (ldx < K * chunks || ldw < K * chunks || ldx % 8 != 0 || ldw % 8 != 0)
    throw std::invalid_argument(name +
                                ": row strides must be multiples of 8 and at least K * chunks");
  if (part_elements < 256 || part_elements % 4 != 0 ||
      M * N > static_cast<int64_t>(parts.size()) * part_elements)
    throw std::invalid_argument(name +
                                ": parts of a multiple of 4 elements, at least 256, "
                                "that hold the M x N sum");
  for (float* part : parts) {
    if (part == nullptr || reinterpret_cast<uintptr_t>(part) % 16 != 0)
      throw std::invalid_argument(name + ": parts must be 16-byte aligned");
  }
  if (!uses_wgmma(dtype) || K % kTileK != 0) return false;
  const int sm_count = current_device_traits().sm_count;
  const KernelShape& shape = choose_shape(M, N, sm_count, true, true);
  record_path(tile_path(shape.tile));
  SubtreeParts where{};
  for (std::size_t p = 0; p < parts.size(); ++p) where.part[p] = parts[p];
  where.part_elements = part_elements;
  where.count = static_cast<int>((M * N + part_elements - 1) / part_elements);
  (dtype == GemmDType::bf16 ? shape.bf16_subtree : shape.fp16_subtree)(
      x, ldx, w, ldw, M, N, K, chunks, where, as_stream(stream), sm_count);
  return true;
}

std::vector<PathDecl> fixed_order_gemm_paths() {
  std::vector<PathDecl> paths;
  for (const KernelShape& shape : kKernelShapes) {
    PathDecl decl(tile_path(shape.tile),
                  "wgmma tile " + shape.tile.name() +
                      (never_picked(shape.tile) ? " (the automatic pick never takes it)"
                                                : " (picked by M and N)"));
    if (never_picked(shape.tile)) {
      decl.only_forced();
    } else {
      decl.forceable();
    }
    paths.push_back(decl);
  }
  paths.push_back(
      PathDecl("portable-fma", "fp32 FMA chain (fp32, and bf16/fp16 off sm_90)").forceable());
  paths.emplace_back("dw.token-sequential", "dW: one FMA per token in token order");
  return paths;
}

std::string fixed_order_gemm_path_for(GemmDType dtype, int64_t M, int64_t N) {
  if (!uses_wgmma(dtype)) return "portable-fma";
  return tile_path(choose_shape(M, N, current_device_traits().sm_count).tile);
}

void fixed_order_gemm_forced(GemmDType dtype, const std::string& path, const void* x, const void* w,
                             void* y, int64_t M, int64_t N, int64_t K, CUstream_st* stream) {
  if (path.empty()) return fixed_order_gemm(dtype, x, w, y, M, N, K, stream);
  if (path == "portable-fma") {
    record_path(path);
    detail::fixed_order_gemm_portable(dtype, x, w, y, M, N, K, stream);
    return;
  }
  for (const KernelShape& shape : kKernelShapes) {
    if (tile_path(shape.tile) != path) continue;
    detail::fixed_order_gemm_tile(dtype, shape.tile, x, w, y, M, N, K, stream);
    return;
  }
  throw std::invalid_argument("fixed_order_gemm: no path " + path);
}

namespace detail {
std::string GemmTile::name() const {
  return std::to_string(rows) + "x" + std::to_string(cols) + (w_as_a ? " W-as-A" : "");
}

std::vector<GemmTile> fixed_order_gemm_tiles() {
  std::vector<GemmTile> tiles;
  for (const KernelShape& shape : kKernelShapes) tiles.push_back(shape.tile);
  return tiles;
}

void fixed_order_gemm_tile(GemmDType dtype, const GemmTile& tile, const void* x, const void* w,
                           void* y, int64_t M, int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_tile", x, w, y, M, N, K);
  const KernelShape* shape = find_shape(tile);
  if (!uses_wgmma(dtype) || shape == nullptr)
    throw std::invalid_argument(
        "fixed_order_gemm_tile: needs bf16/fp16 on sm_90 and a shape of "
        "fixed_order_gemm_tiles(), got " +
        tile.name());
  record_path(tile_path(tile));
  launch_shape(*shape, dtype, x, w, y, M, N, K, as_stream(stream),
               current_device_traits().sm_count);
}

GemmTile fixed_order_gemm_chosen_tile(int64_t M, int64_t N, int sm_count) {
  return choose_shape(M, N, sm_count).tile;
}

bool fixed_order_gemm_sentinel_writes() {
  return sentinel_writes_enabled();
}

std::uint64_t count_sentinel_elements(const void* y, int64_t elements, CUstream_st* stream) {
  return count_sentinel(y, elements, as_stream(stream));
}
}  // namespace detail

}  // namespace bitcheck::cuda
