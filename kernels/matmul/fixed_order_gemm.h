// matmul/fixed-order: batch-invariant GEMM launchers (forward Y = X·Wᵀ and a token-sequential dW
// accumulation). Plain C++ header, no CUDA headers; the kernels live in fixed_order_gemm.cu.
//
// Layouts are row-major. Accumulation is fp32; outputs are rounded once, round-to-nearest-even.
// fp32 inputs use plain fp32 FMA (never TF32). Every output element is produced by the same
// sequence of floating-point operations whatever M is, whichever row it sits in and whatever
// rows surround it (padding included): see the comment at the top of fixed_order_gemm.cu.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/paths.h"
#include "gemm_dtype.h"  // GemmDType { bf16, fp16, fp32 }

struct CUstream_st;  // cudaStream_t without CUDA headers; nullptr is the default stream.

namespace bitcheck::cuda {

// Y[M,N] = X[M,K] · W[N,K]ᵀ, all three in `dtype`, fp32 accumulation, one rounding to `dtype`.
// Requires M >= 1, N >= 1, K >= 1 with N and K multiples of 8, and 16-byte aligned pointers.
// bf16/fp16 on an sm_90 GPU take the wgmma + TMA path; every other case (fp32, other GPUs) takes a
// portable fp32-FMA path. The path depends on (dtype, device) only, never on M, N or K; on the
// wgmma path M and N pick only the tile shape and orientation, which change no bit.
void fixed_order_gemm(GemmDType dtype, const void* x, const void* w, void* y, int64_t M, int64_t N,
                      int64_t K, CUstream_st* stream);

// Y[M,N] (fp32) = X[M,K] · W[N,K]ᵀ with the accumulators stored unrounded: the chain of
// fixed_order_gemm per element (on the wgmma path the accumulator fixed_order_gemm rounds; on the
// portable path one fp32 FMA chain), whatever M is. X's and W's rows lie ldx and ldw elements
// apart (multiples of 8), so a block of K columns of a wider matrix is read in place, zeros past
// its last column. With `chunks` > 1, that many such products of consecutive K-column blocks, the
// c-th into y + c * M * N, each with the bits of its own call (one launch when K is a multiple of
// 64); ldx and ldw >= K * chunks. For sums split into chunks (the TP impls' fixed-order leaves).
// Records its path as fixed_order_gemm does.
void fixed_order_gemm_fp32_out(GemmDType dtype, const void* x, int64_t ldx, const void* w,
                               int64_t ldw, float* y, int64_t M, int64_t N, int64_t K,
                               CUstream_st* stream, int chunks = 1);

// The sum of `chunks` (1, 2 or 4) such products (K columns each, consecutive blocks of X's and W's
// rows as for fixed_order_gemm_fp32_out) in the fixed binary tree over the chunks,
// ((p0 + p1) + (p2 + p3)), in fp32, unrounded: per element the bits of fixed_order_gemm_fp32_out's
// chunks summed in that tree (common/rank_tree.cuh), computed in one launch without storing the
// products. Element e of the [M, N] sum goes to parts[e / part_elements] + e % part_elements (1 to
// 8 parts of a multiple of 4 elements, at least 256, 16-byte aligned; another rank's memory over
// peer memory, which the kernel's stores reach before it ends). Returns false and launches nothing
// where the wgmma path does not take it (not bf16/fp16 on sm_90, or K not a multiple of 64).
// Records its tile path. For the TP matmuls' chunk tree (a rank's subtree).
bool fixed_order_gemm_fp32_subtree(GemmDType dtype, const void* x, int64_t ldx, const void* w,
                                   int64_t ldw, int64_t M, int64_t N, int64_t K, int chunks,
                                   const std::vector<float*>& parts, int64_t part_elements,
                                   CUstream_st* stream);

// dW[N,K] (fp32, in/out) += Σ_t dY[t,n] · X[t,k], t = 0..T-1 in order, one fp32 FMA per token into
// the running value of dW[n,k]. dy is [T,N], x is [T,K], both in `dtype`. Splitting the tokens into
// consecutive micro-batches and calling this once per micro-batch gives identical bits.
void fixed_order_gemm_dw_accumulate(GemmDType dtype, const void* dy, const void* x, float* dw,
                                    int64_t T, int64_t N, int64_t K, CUstream_st* stream);

// Which forward path fixed_order_gemm takes for `dtype` on the current device
// ("wgmma-tma-m64n256k16" or "portable-fma"), for reports and probes.
const char* fixed_order_gemm_path(GemmDType dtype);

// The launch paths the calls above record (core/paths.h): "tile.X-as-A.128x256" and
// "tile.W-as-A.176x192" (one per wgmma tile shape; the three the automatic pick never takes are
// reached only by forcing), "portable-fma", "dw.token-sequential".
std::vector<PathDecl> fixed_order_gemm_paths();
// The path fixed_order_gemm records for M x N in `dtype` on the current device.
std::string fixed_order_gemm_path_for(GemmDType dtype, int64_t M, int64_t N);
// fixed_order_gemm with a path of fixed_order_gemm_paths() forced (a tile shape, or
// "portable-fma"; empty: the automatic pick); std::invalid_argument for another path or one the
// device cannot run.
void fixed_order_gemm_forced(GemmDType dtype, const std::string& path, const void* x, const void* w,
                             void* y, int64_t M, int64_t N, int64_t K, CUstream_st* stream);

namespace detail {
// The portable path on any GPU (it is what non-sm_90 devices and fp32 get), so probes and tests can
// check it on a Hopper machine too. Same contract as fixed_order_gemm.
void fixed_order_gemm_portable(GemmDType dtype, const void* x, const void* w, void* y, int64_t M,
                               int64_t N, int64_t K, CUstream_st* stream);
// A tile shape of the wgmma path: rows x cols of Y per tile, and the orientation (w_as_a: W is the
// wgmma A operand and each consumer holds 64 columns of Y transposed).
struct GemmTile {
  int rows = 0, cols = 0;
  bool w_as_a = false;
  std::string name() const;  // "128x256", "176x192 W-as-A"
};
// Every tile shape the wgmma path has a kernel for (the automatic choice picks among them).
std::vector<GemmTile> fixed_order_gemm_tiles();
// The wgmma path with a forced tile shape instead of the per-launch choice, so probes can prove
// every shape gives identical bits and time each one. bf16/fp16 on sm_90 only.
void fixed_order_gemm_tile(GemmDType dtype, const GemmTile& tile, const void* x, const void* w,
                           void* y, int64_t M, int64_t N, int64_t K, CUstream_st* stream);
// The tile shape fixed_order_gemm picks for M x N on `sm_count` SMs, for tables.
GemmTile fixed_order_gemm_chosen_tile(int64_t M, int64_t N, int sm_count);
// Whether the wgmma path runs with the sentinel proof of full writes (BITCHECK_SENTINEL_WRITES=1:
// Y filled with all-ones bits before each launch, every element checked after; a launch that leaves
// one unwritten throws). For compute-sanitizer's initcheck, which does not see TMA stores.
bool fixed_order_gemm_sentinel_writes();
// How many of the first `elements` 16-bit elements at `y` hold the sentinel (0xFFFF); synchronizes
// `stream`. The check behind the sentinel mode, exposed so a probe can prove it detects a gap.
std::uint64_t count_sentinel_elements(const void* y, int64_t elements, CUstream_st* stream);
}  // namespace detail

}  // namespace bitcheck::cuda
