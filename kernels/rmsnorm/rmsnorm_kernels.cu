// rmsnorm/* kernels: RMSNorm and fused residual-add + RMSNorm (forward, backward rows), each beside
// its launcher; dweight's token-ordered column accumulation is common/token_columns.cu.
//
// Why the reduction orders are independent of batch size, position and padding:
// - Forward rows (the fixed-order configuration: block_threads == rmsnorm_fixed_block_threads, no
//   split, rows a whole number of 16-byte units, at most 32 warps of 4 units per row): the row
//   layout is rmsnorm_forward_row_layout(dtype, width), a function of the dtype and the width only.
//   A row of U 16-byte units (8 elements for bf16/fp16, 4 for fp32) gets
//   T = 32 * min(32, ceil(U / 64)) threads (whole warps, 2 units each, up to 4 for the widest
//   rows); thread t sums the squares of units t, t + T, t + 2T, ... (< U) in that order, elements
//   in index order, then an xor-shuffle tree within each warp; a row of several warps (one row per
//   block) adds the warp totals in warp order, each thread the same sum. Nothing in that order
//   involves the token's index, its slot, the token count, the rows per block (several one-warp
//   rows share a block, each reduced by its own warp alone), the grid or the SM count. The row
//   stays in registers (raw 16-byte units) between the sum and the scaling: one read of the row.
//   Buffers that are not 16-byte aligned take the same kernel with element-wise loads and stores:
//   same layout, same order, same bits. Pad slots get no thread.
// - Other forward rows (a width that is not a whole number of 16-byte units, wider rows, a
//   control's split rows or block size) and all backward rows: one block per real token,
//   `block_threads` threads. Thread t sums the elements of groups t, t + B, t + 2B, ... (groups of
//   8 when width % 8 == 0, else single elements) in index order; the block then combines
//   per-thread sums with a fixed xor-shuffle tree per warp and warp 0 adds the warp sums in warp
//   order. The order depends on (width, block_threads) only. The backward vector kernel
//   (width % 8 == 0, 16-byte aligned rows, width <= 8192) follows exactly that order with 16-byte
//   group loads and keeps the thread's groups in registers: same bits as the scalar backward
//   kernel.
// - A control's split rows (row_splits > 1) reduce each column slice in its own block and add the
//   slices' partials (rounded through the io-dtype workspace) in slice order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/cuda_check.cuh"
#include "common/vector_io.cuh"
#include "core/paths.h"
#include "rmsnorm_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr float kEps = 1e-6f;

// The normalized row's element: x, or dtype(x + residual) for the fused add.
__device__ __forceinline__ float row_value(const RmsnormLaunch& a, int64_t index) {
  float v = load_element(a.x, a.dtype, index);
  if (!a.residual) return v;
  return round_to_dtype(a.dtype, __fadd_rn(v, load_element(a.residual, a.dtype, index)));
}

// Block-wide sum of two values with a fixed shape: xor tree within each warp, then warp 0 adds the
// warp sums in warp order. Every thread gets the totals.
__device__ __forceinline__ float2 block_sum2(float2 v) {
  __shared__ float2 warp_sums[32];
  __shared__ float2 total;
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x = __fadd_rn(v.x, __shfl_xor_sync(0xffffffffu, v.x, offset));
    v.y = __fadd_rn(v.y, __shfl_xor_sync(0xffffffffu, v.y, offset));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float2 sum = warp_sums[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      sum.x = __fadd_rn(sum.x, warp_sums[w].x);
      sum.y = __fadd_rn(sum.y, warp_sums[w].y);
    }
    total = sum;
  }
  __syncthreads();
  return total;
}

// Per-thread partial sums in the fixed element order: (sum of v^2, sum of dy * w * v).
__device__ __forceinline__ float2 row_partials(const RmsnormLaunch& a, int64_t row,
                                               bool with_gradient) {
  const int group = a.width % 8 == 0 ? 8 : 1;
  const int64_t groups = a.width / group;
  float2 sum = make_float2(0.f, 0.f);
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    for (int j = 0; j < group; ++j) {
      const int64_t column = g * group + j;
      const float v = row_value(a, row + column);
      sum.x = __fadd_rn(sum.x, __fmul_rn(v, v));
      if (with_gradient) {
        const float gradient = __fmul_rn(load_element(a.dy, a.dtype, row + column),
                                         load_element(a.weight, a.dtype, column));
        sum.y = __fadd_rn(sum.y, __fmul_rn(gradient, v));
      }
    }
  }
  return sum;
}

__device__ __forceinline__ float inverse_rms_of(float sum_of_squares, int64_t width) {
  return __fdiv_rn(
      1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_of_squares, static_cast<float>(width)), kEps)));
}

// Split rows (control): block (split, token) reduces columns [split * slice, (split + 1) * slice)
// and writes its two partial sums into the io-dtype workspace (rounded to bf16/fp16 there).
__global__ void rmsnorm_partials_kernel(RmsnormLaunch a, bool with_gradient) {
  const int64_t row = static_cast<int64_t>(a.tokens[blockIdx.y]) * a.width;
  const int64_t slice = (a.width + a.row_splits - 1) / a.row_splits;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * slice;
  const int64_t last = min(a.width, first + slice);
  float2 sum = make_float2(0.f, 0.f);
  for (int64_t c = first + threadIdx.x; c < last; c += blockDim.x) {
    const float v = row_value(a, row + c);
    sum.x = __fadd_rn(sum.x, __fmul_rn(v, v));
    if (with_gradient) {
      const float gradient =
          __fmul_rn(load_element(a.dy, a.dtype, row + c), load_element(a.weight, a.dtype, c));
      sum.y = __fadd_rn(sum.y, __fmul_rn(gradient, v));
    }
  }
  sum = block_sum2(sum);
  if (threadIdx.x == 0) {
    const int64_t index = (static_cast<int64_t>(blockIdx.y) * a.row_splits + blockIdx.x) * 2;
    store_element(a.partials, a.dtype, index, sum.x);
    store_element(a.partials, a.dtype, index + 1, sum.y);
  }
}

// The row's (sum of v^2, sum of dy * w * v): reduced by this block, or the split partials added
// in slice order. Every thread of the block calls it.
__device__ __forceinline__ float2 row_sums(const RmsnormLaunch& a, int64_t row,
                                           bool with_gradient) {
  if (a.row_splits <= 1) return block_sum2(row_partials(a, row, with_gradient));
  float2 sum = make_float2(0.f, 0.f);
  for (int s = 0; s < a.row_splits; ++s) {
    const int64_t index = (static_cast<int64_t>(blockIdx.x) * a.row_splits + s) * 2;
    sum.x = __fadd_rn(sum.x, load_element(a.partials, a.dtype, index));
    sum.y = __fadd_rn(sum.y, load_element(a.partials, a.dtype, index + 1));
  }
  return sum;
}

__global__ void rmsnorm_forward_kernel(RmsnormLaunch a) {
  const int64_t row = static_cast<int64_t>(a.tokens[blockIdx.x]) * a.width;
  const float r = inverse_rms_of(row_sums(a, row, false).x, a.width);
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) {
    const float v = row_value(a, row + c);
    store_element(a.y, a.dtype, row + c,
                  __fmul_rn(__fmul_rn(v, r), load_element(a.weight, a.dtype, c)));
    if (a.h_out) store_element(a.h_out, a.dtype, row + c, v);
  }
}

// dx = (g - xhat * projection) * r (+ dh), g = dy * w, xhat = v * r, projection = r * sum(g v) / W.
__global__ void rmsnorm_backward_rows_kernel(RmsnormLaunch a) {
  const int64_t slot = a.tokens[blockIdx.x];
  const int64_t row = slot * a.width;
  const float2 sums = row_sums(a, row, true);
  const float r = inverse_rms_of(sums.x, a.width);
  const float projection = __fdiv_rn(__fmul_rn(sums.y, r), static_cast<float>(a.width));
  if (threadIdx.x == 0) a.inverse_rms[slot] = r;
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) {
    const float xhat = __fmul_rn(row_value(a, row + c), r);
    const float g =
        __fmul_rn(load_element(a.dy, a.dtype, row + c), load_element(a.weight, a.dtype, c));
    float value = __fmul_rn(__fsub_rn(g, __fmul_rn(xhat, projection)), r);
    if (a.dh) value = __fadd_rn(load_element(a.dh, a.dtype, row + c), value);
    store_element(a.dx, a.dtype, row + c, value);
    if (a.dresidual) store_element(a.dresidual, a.dtype, row + c, value);
  }
}

// Backward vector kernel: block of rmsnorm_fixed_block_threads; thread t holds groups t, t + 256,
// ... (at most kGroups of them) of 8 elements. Same per-thread order as row_partials (groups in
// increasing order, elements in index order), same block_sum2: same bits, one pass over memory.
constexpr int kVectorThreads = rmsnorm_fixed_block_threads;

// The group's 8 row values: x, or dtype(x + residual) for the fused add.
__device__ __forceinline__ void row_group(const RmsnormLaunch& a, int64_t group, float* v) {
  load_group8(a.x, a.dtype, group, v);
  if (!a.residual) return;
  float r[vector_group];
  load_group8(a.residual, a.dtype, group, r);
#pragma unroll
  for (int j = 0; j < vector_group; ++j) v[j] = round_to_dtype(a.dtype, __fadd_rn(v[j], r[j]));
}

template <int kGroups>
__global__ void __launch_bounds__(kVectorThreads) rmsnorm_backward_vector_kernel(RmsnormLaunch a) {
  const int64_t groups = a.width / vector_group;
  const int64_t slot = a.tokens[blockIdx.x];
  const int64_t row_group0 = slot * groups;
  float v[kGroups][vector_group], gradient[kGroups][vector_group];
  float2 sum = make_float2(0.f, 0.f);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int64_t g = threadIdx.x + static_cast<int64_t>(k) * kVectorThreads;
    if (g < groups) {
      float dy[vector_group], w[vector_group];
      row_group(a, row_group0 + g, v[k]);
      load_group8(a.dy, a.dtype, row_group0 + g, dy);
      load_group8(a.weight, a.dtype, g, w);
#pragma unroll
      for (int j = 0; j < vector_group; ++j) {
        gradient[k][j] = __fmul_rn(dy[j], w[j]);
        sum.x = __fadd_rn(sum.x, __fmul_rn(v[k][j], v[k][j]));
        sum.y = __fadd_rn(sum.y, __fmul_rn(gradient[k][j], v[k][j]));
      }
    }
  }
  const float2 sums = block_sum2(sum);
  const float r = inverse_rms_of(sums.x, a.width);
  const float projection = __fdiv_rn(__fmul_rn(sums.y, r), static_cast<float>(a.width));
  if (threadIdx.x == 0) a.inverse_rms[slot] = r;
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int64_t g = threadIdx.x + static_cast<int64_t>(k) * kVectorThreads;
    if (g < groups) {
      float dx[vector_group], dh[vector_group];
      if (a.dh) load_group8(a.dh, a.dtype, row_group0 + g, dh);
#pragma unroll
      for (int j = 0; j < vector_group; ++j) {
        const float xhat = __fmul_rn(v[k][j], r);
        dx[j] = __fmul_rn(__fsub_rn(gradient[k][j], __fmul_rn(xhat, projection)), r);
        if (a.dh) dx[j] = __fadd_rn(dh[j], dx[j]);
      }
      store_group8(a.dx, a.dtype, row_group0 + g, dx);
      if (a.dresidual) store_group8(a.dresidual, a.dtype, row_group0 + g, dx);
    }
  }
}

// Groups per thread the backward vector kernel needs for this launch, or 0 when the scalar kernel
// must run (width not a multiple of 8, a misaligned buffer, a split-row control, a block size other
// than 256, or a row too long to keep in registers).
int vector_groups_per_thread(const RmsnormLaunch& a, int max_groups) {
  if (a.width % vector_group != 0 || a.row_splits > 1 || a.block_threads != kVectorThreads)
    return 0;
  for (const void* p :
       {a.x, a.residual, a.weight, static_cast<const void*>(a.y), static_cast<const void*>(a.h_out),
        a.dy, a.dh, static_cast<const void*>(a.dx), static_cast<const void*>(a.dresidual)}) {
    if (!aligned_16(p)) return 0;
  }
  const int64_t per_thread = (a.width / vector_group + kVectorThreads - 1) / kVectorThreads;
  for (int groups = 1; groups <= max_groups; groups *= 2) {
    if (per_thread <= groups) return groups;
  }
  return 0;
}

// ---- Forward row kernel (the fixed-order configuration) ----------------------------------------
// A row is U 16-byte units held as raw io-dtype bits (one uint4 each, 4 registers whatever the
// dtype). Layout (rmsnorm_forward_row_layout, host): W = min(32, ceil(U / (32 * kUnitsPerThread)))
// warps, T = 32 * W threads per row, thread t holds units t + k * T < U (at most
// kMaxUnitsPerThread). Two units a thread keep the kernel at 32 registers: 2048 threads (64 KB of
// loads, 128 KB for the fused add) in flight per SM. One warp per row: kOneWarpRowsPerBlock rows
// per block, one per warp (blockDim = (32, rows)); several warps per row: one row per block
// (blockDim = (T, 1)).
constexpr int kUnitBytes = 16;
constexpr int kUnitsPerThread = 2;
constexpr int kMaxUnitsPerThread = 4;
constexpr int kMaxWarpsPerRow = 32;
constexpr int kOneWarpRowsPerBlock = 4;
constexpr int kMaxRowThreads = 32 * kMaxWarpsPerRow;

// One 16-byte unit's elements as fp32 (exact) and back (round to nearest even, the same bits as
// __float2bfloat16_rn / __float2half_rn); element i of the unit is element unit * kElements + i of
// the buffer (little-endian halves: the low 16 bits of a word hold the lower index).
template <DeviceDType D>
struct Unit;

template <>
struct Unit<DeviceDType::bf16> {
  static constexpr int kElements = 8;
  static constexpr int kElementBytes = 2;
  __device__ static __forceinline__ void unpack(const uint4& u, float* f) {
    widen_group8(u, DeviceDType::bf16, f);
  }
  __device__ static __forceinline__ uint4 pack(const float* f) {
    return narrow_group8(f, DeviceDType::bf16);
  }
};

template <>
struct Unit<DeviceDType::fp16> {
  static constexpr int kElements = 8;
  static constexpr int kElementBytes = 2;
  __device__ static __forceinline__ void unpack(const uint4& u, float* f) {
    widen_group8(u, DeviceDType::fp16, f);
  }
  __device__ static __forceinline__ uint4 pack(const float* f) {
    return narrow_group8(f, DeviceDType::fp16);
  }
};

template <>
struct Unit<DeviceDType::fp32> {
  static constexpr int kElements = 4;
  static constexpr int kElementBytes = 4;
  __device__ static __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z),
    f[3] = __uint_as_float(u.w);
  }
  __device__ static __forceinline__ uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

// Unit `unit` of `base`: one 16-byte access when kAligned, else element by element (a 16- or
// 32-bit load each, assembled into the same bits). Row inputs are read once (`streaming`: evict
// first); the weight is read by every row and kept in the read-only cache.
template <DeviceDType D, bool kAligned>
__device__ __forceinline__ uint4 load_unit(const void* base, int64_t unit, bool streaming) {
  if constexpr (kAligned) {
    const uint4* p = static_cast<const uint4*>(base) + unit;
    return streaming ? __ldcs(p) : __ldg(p);
  } else if constexpr (Unit<D>::kElementBytes == 4) {
    const uint32_t* p = static_cast<const uint32_t*>(base) + unit * 4;
    return make_uint4(p[0], p[1], p[2], p[3]);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(base) + unit * 8;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = static_cast<uint32_t>(p[2 * i]) | (static_cast<uint32_t>(p[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <DeviceDType D, bool kAligned>
__device__ __forceinline__ void store_unit(void* base, int64_t unit, const uint4& value) {
  if constexpr (kAligned) {
    static_cast<uint4*>(base)[unit] = value;
  } else if constexpr (Unit<D>::kElementBytes == 4) {
    uint32_t* p = static_cast<uint32_t*>(base) + unit * 4;
    p[0] = value.x, p[1] = value.y, p[2] = value.z, p[3] = value.w;
  } else {
    uint16_t* p = static_cast<uint16_t*>(base) + unit * 8;
    const uint32_t w[4] = {value.x, value.y, value.z, value.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      p[2 * i] = static_cast<uint16_t>(w[i] & 0xFFFFu);
      p[2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
    }
  }
}

// The row's sum over its threads, the same bits in every one of them. An xor tree within each warp
// (at each step the two partners add the same two values, commuted, so all 32 lanes end equal);
// rows of several warps (blockDim.x > 32, then one row per block) add the warp totals in warp
// order, every thread the same sequence. Every thread of the row's warps calls it: full-mask
// shuffles, and the block barrier only when the block is one row.
__device__ __forceinline__ float row_total(float partial) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    partial = __fadd_rn(partial, __shfl_xor_sync(0xffffffffu, partial, offset));
  }
  const int warps = static_cast<int>(blockDim.x / 32);
  if (warps == 1) return partial;
  __shared__ float warp_totals[kMaxWarpsPerRow];
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = partial;
  __syncthreads();
  float total = warp_totals[0];
  for (int w = 1; w < warps; ++w) total = __fadd_rn(total, warp_totals[w]);
  return total;
}

// kUnits >= ceil(units / blockDim.x) bounds the registers; the guard u < units decides which units
// a thread holds, so the order does not depend on kUnits (the unaligned variant runs with
// kMaxUnitsPerThread). kFused: the fused add (residual set). Up to two units a thread:
// at most 32 registers (full occupancy; ptxas needs no more, no spills); four: 64.
template <DeviceDType D, int kUnits, bool kAligned, bool kFused>
__global__ void __launch_bounds__(kMaxRowThreads, kUnits <= 2 ? 2 : 1)
    rmsnorm_forward_rows_kernel(RmsnormLaunch a, int units) {
  using U = Unit<D>;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  // Only the last block of one-warp rows has rows past the end; their warps (whole warps:
  // blockDim.x is 32 then) leave before any shuffle, and that kernel shape has no block barrier.
  if (index >= a.token_count) return;
  const int64_t row = static_cast<int64_t>(a.tokens[index]) * units;
  const int threads = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  uint4 h[kUnits] = {};
  // The row's loads first, all in flight together (x and residual).
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const int u = t + k * threads;
    if (u < units) h[k] = load_unit<D, kAligned>(a.x, row + u, true);
  }
  if constexpr (kFused) {
    uint4 residual[kUnits] = {};
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      const int u = t + k * threads;
      if (u < units) residual[k] = load_unit<D, kAligned>(a.residual, row + u, true);
    }
    // h = dtype(x + residual), kept as io-dtype bits (what h_out receives).
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (t + k * threads < units) {
        float x[U::kElements], r[U::kElements];
        U::unpack(h[k], x);
        U::unpack(residual[k], r);
#pragma unroll
        for (int j = 0; j < U::kElements; ++j) x[j] = __fadd_rn(x[j], r[j]);
        h[k] = U::pack(x);
      }
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    if (t + k * threads < units) {
      float v[U::kElements];
      U::unpack(h[k], v);
#pragma unroll
      for (int j = 0; j < U::kElements; ++j) sum = __fadd_rn(sum, __fmul_rn(v[j], v[j]));
    }
  }
  const float r = inverse_rms_of(row_total(sum), a.width);
  // The weight (read by every row, so mostly a cache hit) only now: no registers held for it
  // during the row's loads.
  uint4 weight[kUnits] = {};
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const int u = t + k * threads;
    if (u < units) weight[k] = load_unit<D, kAligned>(a.weight, u, false);
  }
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const int u = t + k * threads;
    if (u < units) {
      float v[U::kElements], w[U::kElements];
      U::unpack(h[k], v);
      U::unpack(weight[k], w);
#pragma unroll
      for (int j = 0; j < U::kElements; ++j) v[j] = __fmul_rn(__fmul_rn(v[j], r), w[j]);
      store_unit<D, kAligned>(a.y, row + u, U::pack(v));
      if (a.h_out) store_unit<D, kAligned>(a.h_out, row + u, h[k]);
    }
  }
}

template <DeviceDType D, bool kFused>
void launch_forward_rows(const RmsnormLaunch& a, const RmsnormRowLayout& layout, bool aligned,
                         CUstream_st* stream) {
  const dim3 block(static_cast<unsigned>(layout.threads_per_row),
                   static_cast<unsigned>(layout.rows_per_block));
  const unsigned blocks =
      static_cast<unsigned>((a.token_count + layout.rows_per_block - 1) / layout.rows_per_block);
  const int units = static_cast<int>(layout.units);
  if (!aligned) {
    rmsnorm_forward_rows_kernel<D, kMaxUnitsPerThread, false, kFused>
        <<<blocks, block, 0, stream>>>(a, units);
    return;
  }
  switch (layout.units_per_thread) {
    case 1:
      rmsnorm_forward_rows_kernel<D, 1, true, kFused><<<blocks, block, 0, stream>>>(a, units);
      break;
    case 2:
      rmsnorm_forward_rows_kernel<D, 2, true, kFused><<<blocks, block, 0, stream>>>(a, units);
      break;
    default:
      rmsnorm_forward_rows_kernel<D, kMaxUnitsPerThread, true, kFused>
          <<<blocks, block, 0, stream>>>(a, units);
      break;
  }
}

template <DeviceDType D>
void launch_forward_rows(const RmsnormLaunch& a, const RmsnormRowLayout& layout, bool aligned,
                         CUstream_st* stream) {
  if (a.residual) {
    launch_forward_rows<D, true>(a, layout, aligned, stream);
  } else {
    launch_forward_rows<D, false>(a, layout, aligned, stream);
  }
}

}  // namespace

namespace {

// Split rows: the partial sums into the workspace first (one block per slice and token).
void launch_partials(const RmsnormLaunch& a, bool with_gradient, CUstream_st* stream) {
  if (a.row_splits <= 1) return;
  record_path("partials");
  if (!a.partials || a.token_count > 65535) {
    throw std::invalid_argument(
        "rmsnorm split rows: need a partials workspace and at most 65535 tokens");
  }
  const dim3 grid(static_cast<unsigned>(a.row_splits), static_cast<unsigned>(a.token_count));
  rmsnorm_partials_kernel<<<grid, a.block_threads, 0, stream>>>(a, with_gradient);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

std::vector<PathDecl> rmsnorm_paths(bool control) {
  std::vector<PathDecl> paths = {
      PathDecl("forward.rows.one-warp",
               "forward: one warp per row, four rows a block (short rows)"),
      PathDecl("forward.rows.multi-warp", "forward: whole warps per row, the row in registers"),
      PathDecl(
          "forward.block-per-row",
          "forward: one block per row (rows not a whole number of 16-byte units, or too long)"),
      PathDecl("backward.vector", "backward: 256 threads a row, 16-byte groups in registers"),
      PathDecl("backward.block-per-row", "backward: 256 threads a row, scalar loads"),
      PathDecl("columns.token-sequential", "dweight: each column summed over tokens in order")};
  if (control)
    paths.emplace_back("partials", "the row split over blocks, partials in the io dtype");
  return paths;
}

RmsnormRowLayout rmsnorm_forward_row_layout(DeviceDType dtype, int64_t width) {
  RmsnormRowLayout layout;
  const int64_t row_bytes = width * (dtype == DeviceDType::fp32 ? 4 : 2);
  if (width <= 0 || row_bytes % kUnitBytes != 0) return layout;
  const int64_t units = row_bytes / kUnitBytes;
  const int64_t warps = std::min<int64_t>(
      kMaxWarpsPerRow, (units + 32 * kUnitsPerThread - 1) / (32 * kUnitsPerThread));
  const int64_t per_thread = (units + 32 * warps - 1) / (32 * warps);
  if (per_thread > kMaxUnitsPerThread) return layout;
  layout.units = units;
  layout.threads_per_row = static_cast<int>(32 * warps);
  layout.units_per_thread = static_cast<int>(per_thread);
  layout.rows_per_block = warps == 1 ? kOneWarpRowsPerBlock : 1;
  return layout;
}

void rmsnorm_forward(const RmsnormLaunch& a, CUstream_st* stream) {
  if (a.token_count == 0) return;
  const RmsnormRowLayout layout = rmsnorm_forward_row_layout(a.dtype, a.width);
  if (layout.threads_per_row > 0 && a.row_splits <= 1 &&
      a.block_threads == rmsnorm_fixed_block_threads) {
    record_path(layout.threads_per_row == 32 ? "forward.rows.one-warp" : "forward.rows.multi-warp");
    bool aligned = true;
    for (const void* p : {a.x, a.residual, a.weight, static_cast<const void*>(a.y),
                          static_cast<const void*>(a.h_out)}) {
      aligned = aligned && aligned_16(p);
    }
    switch (a.dtype) {
      case DeviceDType::bf16:
        launch_forward_rows<DeviceDType::bf16>(a, layout, aligned, stream);
        break;
      case DeviceDType::fp16:
        launch_forward_rows<DeviceDType::fp16>(a, layout, aligned, stream);
        break;
      default:
        launch_forward_rows<DeviceDType::fp32>(a, layout, aligned, stream);
        break;
    }
  } else {
    record_path("forward.block-per-row");
    launch_partials(a, false, stream);
    rmsnorm_forward_kernel<<<static_cast<unsigned>(a.token_count), a.block_threads, 0, stream>>>(a);
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward_rows(const RmsnormLaunch& a, CUstream_st* stream) {
  if (a.token_count == 0) return;
  const unsigned blocks = static_cast<unsigned>(a.token_count);
  const int groups = vector_groups_per_thread(a, 4);
  record_path(groups == 1 || groups == 2 || groups == 4 ? "backward.vector"
                                                        : "backward.block-per-row");
  switch (groups) {
    case 1:
      rmsnorm_backward_vector_kernel<1><<<blocks, kVectorThreads, 0, stream>>>(a);
      break;
    case 2:
      rmsnorm_backward_vector_kernel<2><<<blocks, kVectorThreads, 0, stream>>>(a);
      break;
    case 4:
      rmsnorm_backward_vector_kernel<4><<<blocks, kVectorThreads, 0, stream>>>(a);
      break;
    default:
      launch_partials(a, true, stream);
      rmsnorm_backward_rows_kernel<<<blocks, a.block_threads, 0, stream>>>(a);
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
