// matmul/fixed-order kernels: batch-invariant Y = X·Wᵀ (a Hopper wgmma + TMA path and a portable
// fp32-FMA path) and the token-sequential dW accumulation, each beside its launcher.
//
// Why the reduction order is independent of batch size, row position and padding:
// - Path choice depends on (dtype, device) only. bf16/fp16 on sm_90 always take the wgmma path;
//   fp32 (no TF32, by contract) and other GPUs always take the portable path. M never picks a path.
// - wgmma path: every output element y[m,n] is computed by one consumer warpgroup as
//   acc = 0; for k-block kb = 0, 1, ... (64 wide, ascending): for kk = 0..3:
//   acc = wgmma.m64n256k16(acc, X[m, kb*64+16kk .. +16], W[n, same]) with an fp32 accumulator,
//   then one round-to-nearest-even to the output dtype. Tile shape (128x256), K block (64),
//   instruction (m64n256k16, both operands K-major from 128B-swizzled shared memory) and k order
//   are compile-time constants; there is no split-K and no atomic. M only changes how many tiles
//   exist and which CTA runs which tile, which does not enter any element's arithmetic. Rows past
//   M (and columns past N, and K past the end) are zero-filled by TMA and never stored, and a
//   zero row of X contributes to no other row: padding cannot leak into a real row.
// - portable path: acc = 0; acc = fmaf(x[m,k], w[n,k], acc) for k = 0..K-1 in order, per thread.
// - dW: dw[n,k] = fmaf(dy[t,n], x[t,k], dw[n,k]) for t = 0..T-1 in order, one thread per element;
//   the running value lives in dw between calls, so micro-batching the tokens changes nothing.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "../cuda_check.cuh"
#include "../convert.cuh"
#include "fixed_order_gemm.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BITCHECK_GEMM_SM90A 1
#endif

namespace bitcheck::cuda {
namespace {

// ------------------------------------------------------------------------------------------------
// Hopper path: persistent, warp-specialized (1 TMA producer warpgroup + 1 or 2 wgmma consumer
// warpgroups), 64x256 or 128x256 output tile, 64-wide K blocks, multi-stage mbarrier pipeline.
// Each consumer warpgroup owns 64 rows and runs the same m64n256k16 chain whichever tile height
// is used, so the tile height is a pure scheduling choice (more CTAs for small M).
// ------------------------------------------------------------------------------------------------
constexpr int kTileN = 256;
constexpr int kTileK = 64;  // 64 bf16 = 128 bytes: one 128B swizzle row

template <int Consumers>
struct WgmmaConfig {
  static constexpr int kTileM = 64 * Consumers;
  static constexpr int kThreads = 128 * (Consumers + 1);
  static constexpr int kStages = Consumers == 1 ? 5 : 4;
  static constexpr int kStageBytesA = kTileM * kTileK * 2;
  static constexpr int kStageBytesB = kTileN * kTileK * 2;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kSharedBytes = kStages * kStageBytes + 1024 /*alignment slack*/ + 256;
  static_assert(kSharedBytes <= 227 * 1024, "shared memory per block");
};

#ifdef BITCHECK_GEMM_SM90A
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

__device__ __forceinline__ uint32_t smem_addr(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer)
      : "memory");
}

// wgmma shared-memory matrix descriptor: K-major, 128B swizzle, 8-row core groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* pointer) {
  const uint64_t address = smem_addr(pointer);
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= static_cast<uint64_t>(16 >> 4) << 16;    // leading byte offset (unused for swizzled K-major)
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;  // stride byte offset: 8 rows x 128 bytes
  desc |= 1ull << 62;                              // 128B swizzle
  return desc;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

// d (64x256 fp32 per warpgroup, 128 registers per thread) += A(64x16) · B(256x16)ᵀ.
template <bool IsBf16>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (IsBf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
}

__device__ __forceinline__ void store_pair(__nv_bfloat16* y, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(y) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half* y, float a, float b) {
  *reinterpret_cast<__half2*>(y) = __floats2half2_rn(a, b);
}
#endif  // BITCHECK_GEMM_SM90A

template <typename T, int Consumers>
__global__ void __launch_bounds__(WgmmaConfig<Consumers>::kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap w_map, T* y, int M, int N, int K) {
#ifdef BITCHECK_GEMM_SM90A
  using Config = WgmmaConfig<Consumers>;
  constexpr int kTileM = Config::kTileM;
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
  uint64_t* full = reinterpret_cast<uint64_t*>(shared + kStages * kStageBytes);
  uint64_t* empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (M + kTileM - 1) / kTileM;
  const int tiles_n = (N + kTileN - 1) / kTileN;
  const int tile_count = tiles_m * tiles_n;
  const int k_blocks = (K + kTileK - 1) / kTileK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * Consumers);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer: one thread issues all TMA loads
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
      const TileCoord coord = tile_coord(tile, tiles_m, tiles_n);
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbar_wait(&empty[stage], phase ^ 1);
        mbar_expect_tx(&full[stage], kStageBytes);
        tma_load_2d(tiles_a + stage * kStageBytesA, &x_map, &full[stage], kb * kTileK,
                    coord.m * kTileM);
        tma_load_2d(tiles_b + stage * kStageBytesB, &w_map, &full[stage], kb * kTileK,
                    coord.n * kTileN);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  // Consumers: warpgroup 1 owns tile rows 0..63, warpgroup 2 (if any) rows 64..127.
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  int stage = 0;
  uint32_t phase = 0;
  float acc[128];
  for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
    const TileCoord coord = tile_coord(tile, tiles_m, tiles_n);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    int previous_stage = -1;
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbar_wait(&full[stage], phase);
      const unsigned char* a = tiles_a + stage * kStageBytesA + consumer * (64 * kTileK * 2);
      const unsigned char* b = tiles_b + stage * kStageBytesB;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        wgmma_m64n256k16<std::is_same_v<T, __nv_bfloat16>>(acc, smem_desc(a + kk * 32),
                                                            smem_desc(b + kk * 32));
      }
      wgmma_commit();
      // Keep this block's wgmmas in flight; the previous block's are done, release its stage.
      wgmma_wait<1>();
      if (previous_stage >= 0 && lane == 0) mbar_arrive(&empty[previous_stage]);
      previous_stage = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
    if (previous_stage >= 0 && lane == 0) mbar_arrive(&empty[previous_stage]);

    // Accumulator layout of m64nNk16: register 4c+2i+j holds row 16*warp + lane/4 + 8i,
    // column 8c + 2*(lane%4) + j.
    const int row0 = coord.m * kTileM + consumer * 64 + warp_in_group * 16 + lane / 4;
    const int col0 = coord.n * kTileN + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= M) continue;
      T* y_row = y + static_cast<int64_t>(row) * N;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const int col = col0 + 8 * c;
        if (col < N) store_pair(y_row + col, acc[4 * c + 2 * i], acc[4 * c + 2 * i + 1]);
      }
    }
  }
#else
  __trap();  // launched only on sm_90 devices, where the sm_90a cubin is used
#endif
}

// ------------------------------------------------------------------------------------------------
// Portable path: 64x64 tile per 256-thread block, 4x4 outputs per thread, 16-wide K slices staged
// through shared memory as fp32. Each output is one fmaf chain over k = 0..K-1.
// ------------------------------------------------------------------------------------------------
constexpr int kPortableTile = 64;
constexpr int kPortableK = 16;


template <typename T>
__global__ void __launch_bounds__(256)
    portable_gemm_kernel(const T* x, const T* w, T* y, int64_t M, int64_t N, int64_t K) {
  __shared__ float x_tile[kPortableK][kPortableTile + 4];
  __shared__ float w_tile[kPortableK][kPortableTile + 4];
  const int tx = threadIdx.x % 16;  // column group
  const int ty = threadIdx.x / 16;  // row group
  const int64_t row_base = static_cast<int64_t>(blockIdx.y) * kPortableTile;
  const int64_t col_base = static_cast<int64_t>(blockIdx.x) * kPortableTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kPortableK) {
    for (int i = threadIdx.x; i < kPortableTile * kPortableK; i += blockDim.x) {
      const int r = i / kPortableK;
      const int kk = i % kPortableK;
      const int64_t k = k0 + kk;
      const int64_t xr = row_base + r;
      const int64_t wr = col_base + r;
      x_tile[kk][r] = (xr < M && k < K) ? to_float(x[xr * K + k]) : 0.0f;
      w_tile[kk][r] = (wr < N && k < K) ? to_float(w[wr * K + k]) : 0.0f;
    }
    __syncthreads();
    const int k_count = static_cast<int>(K - k0 < kPortableK ? K - k0 : kPortableK);
    for (int kk = 0; kk < k_count; ++kk) {
      float xv[4];
      float wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = x_tile[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = w_tile[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row_base + ty + 16 * i;
    if (row >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col_base + tx + 16 * j;
      if (col < N) y[row * N + col] = from_float<T>(acc[i][j]);
    }
  }
}

// dW[n,k] += Σ_t dy[t,n]·x[t,k], t ascending, one fmaf per token. 64x64 dW tile per block, 4x4
// per thread, 16 tokens at a time staged in shared memory (staging does not reorder the chain).
template <typename T>
__global__ void __launch_bounds__(256)
    dw_accumulate_kernel(const T* dy, const T* x, float* dw, int64_t T_count, int64_t N, int64_t K) {
  __shared__ float dy_tile[kPortableK][kPortableTile];
  __shared__ float x_tile[kPortableK][kPortableTile];
  const int tx = threadIdx.x % 16;  // k group
  const int ty = threadIdx.x / 16;  // n group
  const int64_t n_base = static_cast<int64_t>(blockIdx.y) * kPortableTile;
  const int64_t k_base = static_cast<int64_t>(blockIdx.x) * kPortableTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n_base + ty + 16 * i;
      const int64_t k = k_base + tx + 16 * j;
      acc[i][j] = (n < N && k < K) ? dw[n * K + k] : 0.0f;
    }
  for (int64_t t0 = 0; t0 < T_count; t0 += kPortableK) {
    for (int i = threadIdx.x; i < kPortableTile * kPortableK; i += blockDim.x) {
      const int tt = i / kPortableTile;
      const int c = i % kPortableTile;
      const int64_t t = t0 + tt;
      dy_tile[tt][c] = (t < T_count && n_base + c < N) ? to_float(dy[t * N + n_base + c]) : 0.0f;
      x_tile[tt][c] = (t < T_count && k_base + c < K) ? to_float(x[t * K + k_base + c]) : 0.0f;
    }
    __syncthreads();
    const int t_count = static_cast<int>(T_count - t0 < kPortableK ? T_count - t0 : kPortableK);
    for (int tt = 0; tt < t_count; ++tt) {
      float dyv[4];
      float xv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) dyv[i] = dy_tile[tt][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = x_tile[tt][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(dyv[i], xv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n_base + ty + 16 * i;
      const int64_t k = k_base + tx + 16 * j;
      if (n < N && k < K) dw[n * K + k] = acc[i][j];
    }
}

// ------------------------------------------------------------------------------------------------
// Host side.
// ------------------------------------------------------------------------------------------------
cudaStream_t as_stream(CUstream_st* stream) { return reinterpret_cast<cudaStream_t>(stream); }

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

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult query{};
    BITCHECK_CUDA_CALL(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                                        cudaEnableDefault, &query));
    if (query != cudaDriverEntryPointSuccess || function == nullptr)
      throw std::runtime_error("fixed_order_gemm: cuTensorMapEncodeTiled not available");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// Row-major [rows, cols] 16-bit matrix, box of box_rows x 64 columns, 128B swizzle, OOB zero fill.
CUtensorMap make_tensor_map(CUtensorMapDataType type, const void* base, int64_t rows, int64_t cols,
                            int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kTileK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw std::runtime_error("fixed_order_gemm: cuTensorMapEncodeTiled failed with CUresult " +
                             std::to_string(static_cast<int>(result)));
  return map;
}

// Relative time of a wave of 64-row tiles against a wave of 128-row tiles. Used only to pick the
// tile height. Measured on an H200 (reports/gpu/matmul-bench.md, K = 4096): a full wave of 64-row
// tiles took 35-38 us where one of 128-row tiles took 44 us (0.8-0.87: one consumer warpgroup
// streams the same B tile for half the rows), and 28 us at N = 6144, M = 1000 (0.63). The earlier
// 0.55 picked 64-row tiles at M = 257 on N = 28672 and 128256, which then ran at 0.48x the
// heuristic on the vocabulary shape (5 waves of 64 rows where 3 of 128 fit); 0.65 keeps the
// N = 6144 choice and picks 128 rows there.
constexpr double kSingleConsumerTileCost = 0.65;

// Tile height for this launch: a scheduling choice only (both heights run the same per-element
// wgmma chain, proven bitwise-equal by gemm_probe). 64 rows when M fits in one 64-row tile or when
// the extra CTAs of 64-row tiles finish sooner than full waves of 128-row tiles.
int choose_tile_rows(int64_t M, int64_t N, int sm_count) {
  if (M <= 64) return 64;
  const int64_t tiles_n = (N + kTileN - 1) / kTileN;
  const int64_t waves_128 = ((M + 127) / 128 * tiles_n + sm_count - 1) / sm_count;
  const int64_t waves_64 = ((M + 63) / 64 * tiles_n + sm_count - 1) / sm_count;
  return double(waves_64) * kSingleConsumerTileCost < double(waves_128) ? 64 : 128;
}

template <typename T, int Consumers>
void launch_wgmma(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K,
                  cudaStream_t stream, int sm_count) {
  using Config = WgmmaConfig<Consumers>;
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMap x_map = make_tensor_map(type, x, M, K, Config::kTileM);
  const CUtensorMap w_map = make_tensor_map(type, w, N, K, kTileN);
  // Per call, not cached: the attribute belongs to the current device.
  BITCHECK_CUDA_CALL(cudaFuncSetAttribute(wgmma_gemm_kernel<T, Consumers>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          Config::kSharedBytes));
  const int64_t tiles = ((M + Config::kTileM - 1) / Config::kTileM) * ((N + kTileN - 1) / kTileN);
  const int grid = static_cast<int>(tiles < sm_count ? tiles : sm_count);
  wgmma_gemm_kernel<T, Consumers><<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(
      x_map, w_map, static_cast<T*>(y), static_cast<int>(M), static_cast<int>(N),
      static_cast<int>(K));
  BITCHECK_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_wgmma_rows(int tile_rows, const void* x, const void* w, void* y, int64_t M, int64_t N,
                       int64_t K, cudaStream_t stream, int sm_count) {
  if (tile_rows == 64)
    launch_wgmma<T, 1>(x, w, y, M, N, K, stream, sm_count);
  else
    launch_wgmma<T, 2>(x, w, y, M, N, K, stream, sm_count);
}

void launch_wgmma_dtype(GemmDType dtype, int tile_rows, const void* x, const void* w, void* y,
                        int64_t M, int64_t N, int64_t K, cudaStream_t stream, int sm_count) {
  if (dtype == GemmDType::bf16)
    launch_wgmma_rows<__nv_bfloat16>(tile_rows, x, w, y, M, N, K, stream, sm_count);
  else
    launch_wgmma_rows<__half>(tile_rows, x, w, y, M, N, K, stream, sm_count);
}

template <typename T>
void launch_portable(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K,
                     cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((N + kPortableTile - 1) / kPortableTile),
                  static_cast<unsigned>((M + kPortableTile - 1) / kPortableTile));
  portable_gemm_kernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(x),
                                                    static_cast<const T*>(w), static_cast<T*>(y),
                                                    M, N, K);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void check_shape(const char* what, const void* a, const void* b, const void* c, int64_t M,
                 int64_t N, int64_t K) {
  const std::string name = what;
  if (M < 1 || N < 1 || K < 1) throw std::invalid_argument(name + ": M, N and K must be >= 1");
  if (N % 8 != 0 || K % 8 != 0) throw std::invalid_argument(name + ": N and K must be multiples of 8");
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    throw std::invalid_argument(name + ": dimensions must fit in int32");
  for (const void* p : {a, b, c}) {
    if (p == nullptr) throw std::invalid_argument(name + ": null pointer");
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(name + ": pointers must be 16-byte aligned");
  }
}

bool uses_wgmma(GemmDType dtype) {
  return dtype != GemmDType::fp32 && current_device_traits().hopper;
}

}  // namespace

const char* fixed_order_gemm_path(GemmDType dtype) {
  return uses_wgmma(dtype) ? "wgmma-tma-m64n256k16" : "portable-fma";
}

void fixed_order_gemm(GemmDType dtype, const void* x, const void* w, void* y, int64_t M, int64_t N,
                      int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm", x, w, y, M, N, K);
  const cudaStream_t s = as_stream(stream);
  if (uses_wgmma(dtype)) {
    const int sm_count = current_device_traits().sm_count;
    launch_wgmma_dtype(dtype, choose_tile_rows(M, N, sm_count), x, w, y, M, N, K, s, sm_count);
    return;
  }
  detail::fixed_order_gemm_portable(dtype, x, w, y, M, N, K, stream);
}

namespace detail {
void fixed_order_gemm_portable(GemmDType dtype, const void* x, const void* w, void* y, int64_t M,
                               int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_portable", x, w, y, M, N, K);
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case GemmDType::bf16: return launch_portable<__nv_bfloat16>(x, w, y, M, N, K, s);
    case GemmDType::fp16: return launch_portable<__half>(x, w, y, M, N, K, s);
    case GemmDType::fp32: return launch_portable<float>(x, w, y, M, N, K, s);
  }
}

void fixed_order_gemm_tile_rows(GemmDType dtype, int tile_rows, const void* x, const void* w,
                                void* y, int64_t M, int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_tile_rows", x, w, y, M, N, K);
  if (!uses_wgmma(dtype) || (tile_rows != 64 && tile_rows != 128))
    throw std::invalid_argument(
        "fixed_order_gemm_tile_rows: needs bf16/fp16 on sm_90 and tile_rows 64 or 128");
  launch_wgmma_dtype(dtype, tile_rows, x, w, y, M, N, K, as_stream(stream),
                     current_device_traits().sm_count);
}

int fixed_order_gemm_chosen_tile_rows(int64_t M, int64_t N, int sm_count) {
  return choose_tile_rows(M, N, sm_count);
}
}  // namespace detail

void fixed_order_gemm_dw_accumulate(GemmDType dtype, const void* dy, const void* x, float* dw,
                                    int64_t T, int64_t N, int64_t K, CUstream_st* stream) {
  check_shape("fixed_order_gemm_dw_accumulate", dy, x, dw, T, N, K);
  const dim3 grid(static_cast<unsigned>((K + kPortableTile - 1) / kPortableTile),
                  static_cast<unsigned>((N + kPortableTile - 1) / kPortableTile));
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case GemmDType::bf16:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(dy),
                                                static_cast<const __nv_bfloat16*>(x), dw, T, N, K);
      break;
    case GemmDType::fp16:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const __half*>(dy),
                                                static_cast<const __half*>(x), dw, T, N, K);
      break;
    case GemmDType::fp32:
      dw_accumulate_kernel<<<grid, 256, 0, s>>>(static_cast<const float*>(dy),
                                                static_cast<const float*>(x), dw, T, N, K);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
