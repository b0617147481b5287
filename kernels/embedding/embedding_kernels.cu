// embedding kernels beside their launchers: gather, fixed-order segment-sum scatter, atomicAdd
// scatter (control).
//
// Why the fixed-order backward is independent of batch, position and padding: the host hands the
// real tokens sorted by (id, token order) (a stable sort), one thread owns one (id, column)
// element and adds that id's tokens to the running value read from dtable, one fp32 add per token
// in token order. Which slots the tokens sat in, how many pad slots there were and how the tokens
// were split into micro-batches change no element's sequence of additions. The gather has no
// arithmetic at all.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "common/cuda_check.cuh"
#include "core/paths.h"
#include "embedding_kernels.h"

namespace bitcheck::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

std::int64_t element_bytes(DeviceDType dtype) {
  return dtype == DeviceDType::fp32 ? 4 : 2;
}

__device__ inline float to_float(const __nv_bfloat16* p, std::int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ inline float to_float(const __half* p, std::int64_t i) {
  return __half2float(p[i]);
}
__device__ inline float to_float(const float* p, std::int64_t i) {
  return p[i];
}

__device__ inline void record_error(std::uint64_t* error_record, std::int64_t slot,
                                    std::int32_t id) {
  // One 64-bit store names the slot and the id together; any racing writer also names a bad id.
  *error_record = (static_cast<std::uint64_t>(slot) << 32) | static_cast<std::uint32_t>(id);
}

// Unit = 16, 8, 4 or 2 bytes: the widest that divides the row, so a row is whole units. One warp
// copies one row at a time: its slot and id are read once, then each lane moves kGatherUnroll units
// per step, all loaded before any is stored (a unit per thread, each behind its own slot and id
// lookups, kept too few bytes in flight to reach the copy bandwidth).
constexpr int kGatherUnroll = 4;

template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const std::int32_t* ids, const std::int32_t* slots, std::int64_t rows,
                  const Unit* table, std::int64_t vocab, std::int64_t units_per_row, Unit* out,
                  std::uint64_t* error_record) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       r < rows; r += warps) {
    const std::int64_t slot = slots[r];
    const std::int32_t id = ids[slot];
    if (id < 0 || id >= vocab) {
      if (lane == 0) record_error(error_record, slot, id);
      continue;
    }
    const Unit* source = table + id * units_per_row;
    Unit* target = out + slot * units_per_row;
    for (std::int64_t first = lane; first < units_per_row; first += 32 * kGatherUnroll) {
      Unit units[kGatherUnroll];
#pragma unroll
      for (int k = 0; k < kGatherUnroll; ++k) {
        if (first + 32 * k < units_per_row) units[k] = source[first + 32 * k];
      }
#pragma unroll
      for (int k = 0; k < kGatherUnroll; ++k) {
        if (first + 32 * k < units_per_row) target[first + 32 * k] = units[k];
      }
    }
  }
}

template <typename T>
__global__ void segments_kernel(const T* dout, std::int64_t hidden,
                                const std::int32_t* sorted_slots,
                                const std::int32_t* segment_starts, const std::int32_t* segment_ids,
                                float* dtable) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= hidden) return;
  const std::int64_t g = blockIdx.y;
  float* element = dtable + static_cast<std::int64_t>(segment_ids[g]) * hidden + c;
  float acc = *element;
  for (std::int32_t i = segment_starts[g]; i < segment_starts[g + 1]; ++i) {
    acc += to_float(dout, static_cast<std::int64_t>(sorted_slots[i]) * hidden + c);
  }
  *element = acc;
}

template <typename T>
__global__ void atomic_scatter_control_kernel(const T* dout, std::int64_t hidden,
                                              const std::int32_t* ids, const std::int32_t* slots,
                                              std::int64_t rows, std::int64_t vocab, float* dtable,
                                              std::uint64_t* error_record) {
  const std::int64_t total = rows * hidden;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / hidden, c = i - r * hidden;
    const std::int64_t slot = slots[r];
    const std::int32_t id = ids[slot];
    if (id < 0 || id >= vocab) {
      if (c == 0) record_error(error_record, slot, id);
      continue;
    }
    float* element = dtable + static_cast<std::int64_t>(id) * hidden + c;
    atomicAdd(element, to_float(dout, slot * hidden + c));  // bitcheck-control: the modelled race
  }
}

unsigned grid_for(std::int64_t total) {
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

template <typename Unit>
void launch_gather(const std::int32_t* ids, const std::int32_t* slots, std::int64_t rows,
                   const void* table, std::int64_t vocab, std::int64_t row_bytes, void* out,
                   std::uint64_t* error_record, cudaStream_t s) {
  const std::int64_t units = row_bytes / static_cast<std::int64_t>(sizeof(Unit));
  // A warp per row, a grid-stride loop over rows beyond 65535 x 8 blocks.
  gather_kernel<Unit><<<grid_for(rows * 32), kThreads, 0, s>>>(
      ids, slots, rows, static_cast<const Unit*>(table), vocab, units, static_cast<Unit*>(out),
      error_record);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

void launch_segments(DeviceDType dtype, const void* dout, std::int64_t hidden,
                     const std::int32_t* sorted_slots, const std::int32_t* segment_starts,
                     const std::int32_t* segment_ids, std::int64_t segments, float* dtable,
                     cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((hidden + kThreads - 1) / kThreads),
                  static_cast<unsigned>(segments));
  switch (dtype) {
    case DeviceDType::bf16:
      segments_kernel<<<grid, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(dout), hidden,
                                                sorted_slots, segment_starts, segment_ids, dtable);
      break;
    case DeviceDType::fp16:
      segments_kernel<<<grid, kThreads, 0, s>>>(static_cast<const __half*>(dout), hidden,
                                                sorted_slots, segment_starts, segment_ids, dtable);
      break;
    case DeviceDType::fp32:
      segments_kernel<<<grid, kThreads, 0, s>>>(static_cast<const float*>(dout), hidden,
                                                sorted_slots, segment_starts, segment_ids, dtable);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void embedding_gather(DeviceDType dtype, const std::int32_t* ids, const std::int32_t* slots,
                      std::int64_t rows, const void* table, std::int64_t vocab, std::int64_t hidden,
                      void* out, std::uint64_t* error_record, CUstream_st* stream) {
  if (rows < 0 || vocab < 1 || hidden < 1)
    throw std::invalid_argument("embedding_gather: bad shape");
  if (rows == 0) return;
  record_path("gather");
  const std::int64_t row_bytes = hidden * element_bytes(dtype);
  const cudaStream_t s = as_stream(stream);
  // cudaMalloc'd buffers are 256-byte aligned, so a row-divisible unit is also aligned.
  if (row_bytes % 16 == 0)
    return launch_gather<uint4>(ids, slots, rows, table, vocab, row_bytes, out, error_record, s);
  if (row_bytes % 8 == 0)
    return launch_gather<uint2>(ids, slots, rows, table, vocab, row_bytes, out, error_record, s);
  if (row_bytes % 4 == 0)
    return launch_gather<unsigned>(ids, slots, rows, table, vocab, row_bytes, out, error_record, s);
  launch_gather<unsigned short>(ids, slots, rows, table, vocab, row_bytes, out, error_record, s);
}

void embedding_backward_segments(DeviceDType dtype, const void* dout, std::int64_t hidden,
                                 const std::int32_t* sorted_slots,
                                 const std::int32_t* segment_starts,
                                 const std::int32_t* segment_ids, std::int64_t segments,
                                 float* dtable, CUstream_st* stream) {
  if (segments < 0 || hidden < 1)
    throw std::invalid_argument("embedding_backward_segments: bad shape");
  const cudaStream_t s = as_stream(stream);
  record_path("dtable.id-segments");
  // Segments touch disjoint dtable rows, so launching them in groups (grid.y <= 65535) changes
  // nothing.
  for (std::int64_t first = 0; first < segments; first += 65535) {
    const std::int64_t count = segments - first < 65535 ? segments - first : 65535;
    launch_segments(dtype, dout, hidden, sorted_slots, segment_starts + first, segment_ids + first,
                    count, dtable, s);
  }
}

void embedding_backward_atomic(DeviceDType dtype, const void* dout, std::int64_t hidden,
                               const std::int32_t* ids, const std::int32_t* slots,
                               std::int64_t rows, std::int64_t vocab, float* dtable,
                               std::uint64_t* error_record, CUstream_st* stream) {
  if (rows == 0) return;
  const unsigned grid = grid_for(rows * hidden);
  record_path("dtable.atomic");
  const cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case DeviceDType::bf16:
      atomic_scatter_control_kernel<<<grid, kThreads, 0, s>>>(
          static_cast<const __nv_bfloat16*>(dout), hidden, ids, slots, rows, vocab, dtable,
          error_record);
      break;
    case DeviceDType::fp16:
      atomic_scatter_control_kernel<<<grid, kThreads, 0, s>>>(
          static_cast<const __half*>(dout), hidden, ids, slots, rows, vocab, dtable, error_record);
      break;
    case DeviceDType::fp32:
      atomic_scatter_control_kernel<<<grid, kThreads, 0, s>>>(
          static_cast<const float*>(dout), hidden, ids, slots, rows, vocab, dtable, error_record);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
