// moe kernels beside their launchers: everything of the layer except the expert GEMMs (matmul's
// fixed-order or cuBLASLt GEMMs, one call per expert on the expert-major rows).
//
//   route_kernel             one warp per token: top-k of logit + bias by moe_routing.h's order
//   count_pairs_kernel       one block per expert: how many pairs chose it
//   place_pairs_kernel       one block per expert: its pairs in pair (token) order, stably
//   gather_rows_kernel       each pair's token row into the expert-major order (a copy)
//   swiglu_forward_kernel    a = dtype(silu(g) * u) per element (elementwise_math.h's formula)
//   swiglu_backward_kernel   dg, du per element (the same file's backward formula)
//   combine_kernel           y = dtype(sum_j w_j o_j), and dx = dtype(sum_j dx_j + router term),
//                            j in rank order
//   weight_grads_kernel      one warp per pair: dy · o in a fixed lane order and shuffle tree
//   scale_rows_kernel        dout = dtype(w_j dy) per pair row
//   router_backward_kernel   dlogits, one thread per (token, expert)
//   transpose_kernel         batched transpose through shared memory (bits copied)
//
// Why nothing here depends on the batch: every output element is computed by one thread (or one
// warp, in a fixed lane order and a fixed shuffle tree) from its own token's values, in rank order
// j = 0..k-1, never in the order experts are scheduled or pairs sit in the expert-major buffer
// (the impls put the most loaded expert's run first, so that order follows the batch); the
// per-expert lists are built in token order by a stable block scan, so an expert's rows (what its
// GEMM and its weight gradient see) are in token order whatever the batch around them. The expert
// GEMMs keep each row's K sum in one fixed order (fixed_order_gemm.cu); how many rows an expert
// has, and where its run sits, change which CTA computes a row, not its chain.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/elementwise_math.h"
#include "moe/moe_kernels.h"
#include "moe/moe_launch.cuh"
#include "moe/moe_routing.h"

namespace bitcheck::cuda {
namespace {

using namespace moe_launch;  // kThreads, blocks_for, as_stream, with_type

constexpr int kWarp = 32;
constexpr int kLogitsPerLane = moe::max_experts / kWarp;

// Top-k per token. Lane l holds the keys of experts l, l + 32, ...; each rank takes the best
// untaken key of every lane and a butterfly of ranks_before comparisons, a strict total order, so
// every lane ends with the same winner whatever the grouping.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    route_kernel(const T* logits, const float* bias, std::int64_t tokens, int experts, int topk,
                 std::int32_t* ids, float* weights) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t t =
      static_cast<std::int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
  if (t >= tokens) return;
  const T* row = logits + t * experts;
  float keys[kLogitsPerLane];
#pragma unroll
  for (int i = 0; i < kLogitsPerLane; ++i) {
    const int e = lane + kWarp * i;
    keys[i] = e < experts ? __fadd_rn(to_float(row[e]), bias[e]) : 0.0f;
  }
  std::uint32_t taken = 0;
  float chosen[moe::max_topk];
  for (int j = 0; j < topk; ++j) {
    int best = -1;
    float best_key = 0.0f;
#pragma unroll
    for (int i = 0; i < kLogitsPerLane; ++i) {
      const int e = lane + kWarp * i;
      if (e >= experts || (taken >> i & 1u)) continue;
      if (best < 0 || moe::ranks_before(keys[i], e, best_key, best)) {
        best = e;
        best_key = keys[i];
      }
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const int other = __shfl_xor_sync(0xffffffffu, best, offset);
      const float other_key = __shfl_xor_sync(0xffffffffu, best_key, offset);
      if (other >= 0 && (best < 0 || moe::ranks_before(other_key, other, best_key, best))) {
        best = other;
        best_key = other_key;
      }
    }
    if (best % kWarp == lane) taken |= 1u << (best / kWarp);
    chosen[j] = to_float(row[best]);
    if (lane == 0) ids[t * topk + j] = best;
  }
  if (lane != 0) return;
  float topk_weights[moe::max_topk];
  moe::topk_weights(chosen, topk, topk_weights);
  for (int j = 0; j < topk; ++j) weights[t * topk + j] = topk_weights[j];
}

__global__ void __launch_bounds__(kThreads)
    count_pairs_kernel(const std::int32_t* ids, std::int64_t pairs, std::int32_t* counts) {
  __shared__ int warp_counts[kThreads / kWarp];
  const int expert = static_cast<int>(blockIdx.x);
  int count = 0;
  for (std::int64_t i = threadIdx.x; i < pairs; i += kThreads) count += ids[i] == expert;
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    count += __shfl_xor_sync(0xffffffffu, count, offset);
  if (threadIdx.x % kWarp == 0) warp_counts[threadIdx.x / kWarp] = count;
  __syncthreads();
  if (threadIdx.x != 0) return;
  int total = 0;
  for (int w = 0; w < kThreads / kWarp; ++w) total += warp_counts[w];
  counts[expert] = total;
}

// The block walks the pairs in order, kThreads at a time; a pair's place is the number of the
// expert's pairs before it (ballots within a warp, warp totals before it in the block, and the
// totals of the earlier steps): a stable compaction.
__global__ void __launch_bounds__(kThreads)
    place_pairs_kernel(const std::int32_t* ids, std::int64_t pairs, const std::int64_t* offsets,
                       std::int32_t* entries, std::int32_t* positions) {
  __shared__ int warp_counts[kThreads / kWarp];
  const int expert = static_cast<int>(blockIdx.x);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  std::int64_t base = offsets[expert];
  for (std::int64_t first = 0; first < pairs; first += kThreads) {
    const std::int64_t pair = first + threadIdx.x;
    const bool mine = pair < pairs && ids[pair] == expert;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kThreads / kWarp; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (mine) {
      const std::int64_t place = base + before + __popc(ballot & ((1u << lane) - 1u));
      entries[place] = static_cast<std::int32_t>(pair);
      positions[pair] = static_cast<std::int32_t>(place);
    }
    base += total;
    __syncthreads();
  }
}

// Rows copied in 16-byte units (a row of H elements, H a multiple of 8, is whole units).
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const uint4* rows, const std::int32_t* entries, int topk, std::int64_t count,
                       std::int64_t units, uint4* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count * units) return;
  const std::int64_t p = i / units, unit = i % units;
  out[i] = rows[static_cast<std::int64_t>(entries[p] / topk) * units + unit];
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(const T* gate_up, std::int64_t count, std::int64_t inter, T* activation) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count * inter) return;
  const std::int64_t p = i / inter, c = i % inter;
  const float in[2] = {to_float(gate_up[p * 2 * inter + c]),
                       to_float(gate_up[p * 2 * inter + inter + c])};
  float out = 0.0f;
  elementwise::forward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f, &out);
  activation[i] = from_float<T>(out);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* gate_up, const T* dactivation, std::int64_t count,
                           std::int64_t inter, T* dgate_up) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count * inter) return;
  const std::int64_t p = i / inter, c = i % inter;
  const float in[3] = {to_float(gate_up[p * 2 * inter + c]),
                       to_float(gate_up[p * 2 * inter + inter + c]), to_float(dactivation[i])};
  float out[2];
  elementwise::backward(elementwise::Op::swiglu, elementwise::Variant::exact, in, 0.0f, out);
  dgate_up[p * 2 * inter + c] = from_float<T>(out[0]);
  dgate_up[p * 2 * inter + inter + c] = from_float<T>(out[1]);
}

// sum_j (weights ? w_j * rows_j : rows_j) over the token's pairs in rank order, then + term
// when there is one (the router's, backward), in fp32, rounded once.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    combine_kernel(const T* rows, const std::int32_t* positions, const float* weights,
                   const T* term, std::int64_t tokens, int topk, std::int64_t hidden, T* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= tokens * hidden) return;
  const std::int64_t t = i / hidden, h = i % hidden;
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) {
    const std::int64_t pair = t * topk + j;
    const float value = to_float(rows[positions[pair] * hidden + h]);
    sum = __fadd_rn(sum, weights ? __fmul_rn(weights[pair], value) : value);
  }
  if (term) sum = __fadd_rn(sum, to_float(term[i]));
  out[i] = from_float<T>(sum);
}

// One warp per pair: lane l sums h = l, l + 32, ... in order, then a fixed xor-shuffle tree.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    weight_grads_kernel(const T* dy, const T* out, const std::int32_t* positions,
                        std::int64_t pairs, int topk, std::int64_t hidden, float* weight_grads) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t pair =
      static_cast<std::int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
  if (pair >= pairs) return;
  const T* dy_row = dy + (pair / topk) * hidden;
  const T* out_row = out + static_cast<std::int64_t>(positions[pair]) * hidden;
  float sum = 0.0f;
  for (std::int64_t h = lane; h < hidden; h += kWarp)
    sum = __fadd_rn(sum, __fmul_rn(to_float(dy_row[h]), to_float(out_row[h])));
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  if (lane == 0) weight_grads[pair] = sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scale_rows_kernel(const T* dy, const float* weights, const std::int32_t* positions,
                      std::int64_t pairs, int topk, std::int64_t hidden, T* dout) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= pairs * hidden) return;
  const std::int64_t pair = i / hidden, h = i % hidden;
  dout[static_cast<std::int64_t>(positions[pair]) * hidden + h] =
      from_float<T>(__fmul_rn(weights[pair], to_float(dy[(pair / topk) * hidden + h])));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    router_backward_kernel(const std::int32_t* ids, const float* weights, const float* weight_grads,
                           std::int64_t tokens, int topk, int experts, T* dlogits) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= tokens * experts) return;
  const std::int64_t t = i / experts;
  const int expert = static_cast<int>(i % experts);
  const std::int64_t first = t * topk;
  float mean = 0.0f, dz = 0.0f;
  for (int j = 0; j < topk; ++j)
    mean = __fadd_rn(mean, __fmul_rn(weights[first + j], weight_grads[first + j]));
  for (int j = 0; j < topk; ++j) {
    if (ids[first + j] == expert)
      dz = __fmul_rn(weights[first + j], __fsub_rn(weight_grads[first + j], mean));
  }
  dlogits[i] = from_float<T>(dz);
}

constexpr int kTransposeTile = 32;

template <typename Bits>
__global__ void __launch_bounds__(kTransposeTile * 8)
    transpose_kernel(const Bits* in, std::int64_t rows, std::int64_t cols, Bits* out) {
  __shared__ Bits tile[kTransposeTile][kTransposeTile + 1];
  const std::int64_t batch_offset = static_cast<std::int64_t>(blockIdx.z) * rows * cols;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTransposeTile + threadIdx.x;
  for (int r = threadIdx.y; r < kTransposeTile; r += 8) {
    const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTransposeTile + r;
    if (row < rows && col < cols) tile[r][threadIdx.x] = in[batch_offset + row * cols + col];
  }
  __syncthreads();
  const std::int64_t out_col = static_cast<std::int64_t>(blockIdx.y) * kTransposeTile + threadIdx.x;
  for (int r = threadIdx.y; r < kTransposeTile; r += 8) {
    const std::int64_t out_row = static_cast<std::int64_t>(blockIdx.x) * kTransposeTile + r;
    if (out_row < cols && out_col < rows)
      out[batch_offset + out_row * rows + out_col] = tile[threadIdx.x][r];
  }
}

std::int64_t element_bytes(DeviceDType dtype) {
  return dtype == DeviceDType::fp32 ? 4 : 2;
}

}  // namespace

void moe_route(DeviceDType dtype, const void* logits, const float* bias, std::int64_t tokens,
               int experts, int topk, std::int32_t* ids, float* weights, CUstream_st* stream) {
  if (experts > moe::max_experts || topk > moe::max_topk || topk > experts)
    throw std::invalid_argument("moe_route: E <= 1024 and topk <= min(E, 32) required");
  if (tokens == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    route_kernel<<<blocks_for(tokens, kThreads / kWarp), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(logits), bias, tokens, experts, topk, ids, weights);
  });
}

void moe_count_pairs(const std::int32_t* ids, std::int64_t pairs, int experts, std::int32_t* counts,
                     CUstream_st* stream) {
  count_pairs_kernel<<<static_cast<unsigned>(experts), kThreads, 0, as_stream(stream)>>>(ids, pairs,
                                                                                         counts);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void moe_place_pairs(const std::int32_t* ids, std::int64_t pairs, int experts,
                     const std::int64_t* offsets, std::int32_t* entries, std::int32_t* positions,
                     CUstream_st* stream) {
  place_pairs_kernel<<<static_cast<unsigned>(experts), kThreads, 0, as_stream(stream)>>>(
      ids, pairs, offsets, entries, positions);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void moe_gather_rows(DeviceDType dtype, const void* rows, const std::int32_t* entries, int topk,
                     std::int64_t count, std::int64_t width, void* out, CUstream_st* stream) {
  const std::int64_t row_bytes = width * element_bytes(dtype);
  if (row_bytes % 16 != 0) throw std::invalid_argument("moe_gather_rows: rows of 16-byte units");
  const std::int64_t units = row_bytes / 16;
  if (count == 0) return;
  gather_rows_kernel<<<blocks_for(count * units), kThreads, 0, as_stream(stream)>>>(
      static_cast<const uint4*>(rows), entries, topk, count, units, static_cast<uint4*>(out));
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void moe_swiglu_forward(DeviceDType dtype, const void* gate_up, std::int64_t count,
                        std::int64_t inter, void* activation, CUstream_st* stream) {
  if (count == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    swiglu_forward_kernel<<<blocks_for(count * inter), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(gate_up), count, inter, static_cast<T*>(activation));
  });
}

void moe_swiglu_backward(DeviceDType dtype, const void* gate_up, const void* dactivation,
                         std::int64_t count, std::int64_t inter, void* dgate_up,
                         CUstream_st* stream) {
  if (count == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    swiglu_backward_kernel<<<blocks_for(count * inter), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(gate_up), static_cast<const T*>(dactivation), count, inter,
        static_cast<T*>(dgate_up));
  });
}

void moe_combine(DeviceDType dtype, const void* out, const std::int32_t* positions,
                 const float* weights, std::int64_t tokens, int topk, std::int64_t hidden, void* y,
                 CUstream_st* stream) {
  if (tokens == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    combine_kernel<<<blocks_for(tokens * hidden), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(out), positions, weights, static_cast<const T*>(nullptr), tokens,
        topk, hidden, static_cast<T*>(y));
  });
}

void moe_weight_grads(DeviceDType dtype, const void* dy, const void* out,
                      const std::int32_t* positions, std::int64_t tokens, int topk,
                      std::int64_t hidden, float* weight_grads, CUstream_st* stream) {
  const std::int64_t pairs = tokens * topk;
  if (pairs == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    weight_grads_kernel<<<blocks_for(pairs, kThreads / kWarp), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(out), positions, pairs, topk, hidden,
        weight_grads);
  });
}

void moe_scale_rows(DeviceDType dtype, const void* dy, const float* weights,
                    const std::int32_t* positions, std::int64_t tokens, int topk,
                    std::int64_t hidden, void* dout, CUstream_st* stream) {
  const std::int64_t pairs = tokens * topk;
  if (pairs == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    scale_rows_kernel<<<blocks_for(pairs * hidden), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), weights, positions, pairs, topk, hidden, static_cast<T*>(dout));
  });
}

void moe_router_backward(DeviceDType dtype, const std::int32_t* ids, const float* weights,
                         const float* weight_grads, std::int64_t tokens, int topk, int experts,
                         void* dlogits, CUstream_st* stream) {
  if (tokens == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    router_backward_kernel<<<blocks_for(tokens * experts), kThreads, 0, as_stream(stream)>>>(
        ids, weights, weight_grads, tokens, topk, experts, static_cast<T*>(dlogits));
  });
}

void moe_combine_backward(DeviceDType dtype, const void* dx_pairs, const std::int32_t* positions,
                          const void* router_term, std::int64_t tokens, int topk,
                          std::int64_t hidden, void* dx, CUstream_st* stream) {
  if (tokens == 0) return;
  with_type(dtype, [&](auto type) {
    using T = decltype(type);
    combine_kernel<<<blocks_for(tokens * hidden), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dx_pairs), positions, static_cast<const float*>(nullptr),
        static_cast<const T*>(router_term), tokens, topk, hidden, static_cast<T*>(dx));
  });
}

void moe_transpose(DeviceDType dtype, const void* in, std::int64_t batches, std::int64_t rows,
                   std::int64_t cols, void* out, CUstream_st* stream) {
  const dim3 grid(blocks_for(cols, kTransposeTile), blocks_for(rows, kTransposeTile),
                  static_cast<unsigned>(batches));
  const dim3 block(kTransposeTile, 8);
  if (dtype == DeviceDType::fp32) {
    transpose_kernel<<<grid, block, 0, as_stream(stream)>>>(
        static_cast<const std::uint32_t*>(in), rows, cols, static_cast<std::uint32_t*>(out));
  } else {
    transpose_kernel<<<grid, block, 0, as_stream(stream)>>>(
        static_cast<const std::uint16_t*>(in), rows, cols, static_cast<std::uint16_t*>(out));
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void moe_stack_gate_up(DeviceDType dtype, const void* gate, const void* up, std::int64_t experts,
                       std::int64_t slab, void* out, CUstream_st* stream) {
  const auto slab_bytes = static_cast<std::size_t>(slab * element_bytes(dtype));
  auto* destination = static_cast<unsigned char*>(out);
  for (const void* source : {gate, up}) {
    BITCHECK_CUDA_CALL(cudaMemcpy2DAsync(destination, 2 * slab_bytes, source, slab_bytes,
                                         slab_bytes, static_cast<std::size_t>(experts),
                                         cudaMemcpyDeviceToDevice, as_stream(stream)));
    destination += slab_bytes;
  }
}

ExpertStreams::ExpertStreams() {
  for (int i = 0; i < count; ++i) {
    cudaStream_t stream = nullptr;
    BITCHECK_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    streams_[i] = stream;
  }
  for (void*& event : events_) {
    cudaEvent_t created = nullptr;
    BITCHECK_CUDA_CALL(cudaEventCreateWithFlags(&created, cudaEventDisableTiming));
    event = created;
  }
}

ExpertStreams::~ExpertStreams() {
  for (CUstream_st* stream : streams_) BITCHECK_CUDA_CALL_NOEXCEPT(cudaStreamDestroy(stream));
  for (void* event : events_)
    BITCHECK_CUDA_CALL_NOEXCEPT(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

void ExpertStreams::fork(CUstream_st* origin) {
  const auto forked = static_cast<cudaEvent_t>(events_[count]);
  BITCHECK_CUDA_CALL(cudaEventRecord(forked, as_stream(origin)));
  for (CUstream_st* stream : streams_)
    BITCHECK_CUDA_CALL(cudaStreamWaitEvent(as_stream(stream), forked, 0));
}

void ExpertStreams::join(CUstream_st* origin) {
  for (int i = 0; i < count; ++i) {
    const auto done = static_cast<cudaEvent_t>(events_[i]);
    BITCHECK_CUDA_CALL(cudaEventRecord(done, as_stream(streams_[i])));
    BITCHECK_CUDA_CALL(cudaStreamWaitEvent(as_stream(origin), done, 0));
  }
}

}  // namespace bitcheck::cuda
