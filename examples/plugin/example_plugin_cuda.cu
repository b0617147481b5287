// The example plugin's CUDA matmuls (y = x w^T; x [slots, K], w [N, K], row-major, fp32 or bf16,
// fp32 accumulation), registered on the cuda backend. Tensors are device pointers; the slot map is
// host memory (the launcher copies it to the device); work goes on the call's stream.
//
// fixed-order-cuda: each output element is one fp32 multiply-add chain over k = 0, 1, ..., K-1.
// The 16x16 tiles only stage operands in shared memory; a thread's sum for its (slot, column)
// sees the same values in the same order whatever the batch, the slot or the padding, so a row's
// bits cannot depend on them.
//
// split-k-by-batch-cuda, a control: the K sum is split into a number of slices chosen from the
// batch's real rows (4 below 4 rows, 2 below 64, else 1), each slice's sum rounded to the output
// dtype and the slices added in the output dtype, as a library heuristic picking split-K for
// small M does: a row computed alone differs from the same row in a batch, by construction.
#include <bitcheck/plugin.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr int tile = 16;

template <typename T>
__device__ float to_float(T value);
template <>
__device__ float to_float<float>(float value) {
  return value;
}
template <>
__device__ float to_float<__nv_bfloat16>(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <typename T>
__device__ T from_float(float value);
template <>
__device__ float from_float<float>(float value) {
  return value;
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// One 16x16 tile of y per block: threadIdx.y a slot, threadIdx.x a column. The sum over
// k in [k_first, k_last) runs in index order, one fmaf per k, in one register.
template <typename T>
__global__ void matmul_tile(const T* x, const T* w, T* y, const long long* slot_rows,
                            long long slots, long long n, long long k, int splits) {
  __shared__ float xs[tile][tile];
  __shared__ float ws[tile][tile + 1];
  const long long slot = blockIdx.y * static_cast<long long>(tile) + threadIdx.y;
  const long long col = blockIdx.x * static_cast<long long>(tile) + threadIdx.x;
  const long long w_row = blockIdx.x * static_cast<long long>(tile) + threadIdx.y;
  const long long slice = (k + splits - 1) / splits;
  float total = 0.0f;  // the slices' sum, in the output dtype's precision
  for (int part = 0; part < splits; ++part) {
    const long long k_first = part * slice;
    const long long k_last = k_first + slice < k ? k_first + slice : k;
    float sum = 0.0f;
    for (long long k0 = k_first; k0 < k_last; k0 += tile) {
      const long long kx = k0 + threadIdx.x;
      xs[threadIdx.y][threadIdx.x] =
          slot < slots && kx < k_last ? to_float(x[slot * k + kx]) : 0.0f;
      ws[threadIdx.y][threadIdx.x] = w_row < n && kx < k_last ? to_float(w[w_row * k + kx]) : 0.0f;
      __syncthreads();
      const int steps = k_last - k0 < tile ? static_cast<int>(k_last - k0) : tile;
      for (int i = 0; i < steps; ++i) sum = fmaf(xs[threadIdx.y][i], ws[threadIdx.x][i], sum);
      __syncthreads();
    }
    // One slice: the sum as it is. Several: each slice and the running total in the output
    // dtype, like a split-K reduction in the output type.
    total = splits == 1 ? sum : to_float(from_float<T>(total + to_float(from_float<T>(sum))));
  }
  if (slot < slots && col < n && slot_rows[slot] >= 0) y[slot * n + col] = from_float<T>(total);
}

const bitcheck_tensor* find(const bitcheck_call* call, const char* name) {
  for (int i = 0; i < call->tensor_count; ++i) {
    if (std::strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  }
  return nullptr;
}

int fail(const bitcheck_call* call, const char* what, cudaError_t status) {
  std::snprintf(call->error, call->error_capacity, "%s: %s", what, cudaGetErrorString(status));
  return BITCHECK_PLUGIN_ERROR;
}

// The K slices of the control for a batch of `real_rows` real rows.
int control_splits(long long real_rows) {
  return real_rows < 4 ? 4 : real_rows < 64 ? 2 : 1;
}

int launch(const bitcheck_call* call, bool control) {
  const bitcheck_tensor* x = find(call, "x");
  const bitcheck_tensor* w = find(call, "w");
  const bitcheck_tensor* y = find(call, "y");
  if (!x || !w || !y) {
    std::snprintf(call->error, call->error_capacity, "matmul forward needs x, w and y");
    return BITCHECK_PLUGIN_ERROR;
  }
  if (call->slots == 0) return BITCHECK_PLUGIN_OK;
  long long real_rows = 0;
  for (long long s = 0; s < call->slots; ++s) real_rows += call->slot_rows[s] >= 0;
  const int splits = control ? control_splits(real_rows) : 1;
  const long long n = w->rows, k = w->row_stride;
  auto stream = static_cast<cudaStream_t>(call->stream);
  // The slot map on the device, from the stream's pool (plugin scratch, never shared).
  long long* slot_rows = nullptr;
  const size_t map_bytes = sizeof(long long) * static_cast<size_t>(call->slots);
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&slot_rows), map_bytes, stream);
  if (status != cudaSuccess) return fail(call, "cudaMallocAsync", status);
  status = cudaMemcpyAsync(slot_rows, call->slot_rows, map_bytes, cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess) {
    const dim3 block(tile, tile);
    const dim3 grid(static_cast<unsigned>((n + tile - 1) / tile),
                    static_cast<unsigned>((call->slots + tile - 1) / tile));
    if (std::strcmp(call->dtype, "fp32") == 0) {
      matmul_tile<<<grid, block, 0, stream>>>(
          static_cast<const float*>(x->data), static_cast<const float*>(w->data),
          static_cast<float*>(y->data), slot_rows, call->slots, n, k, splits);
    } else {
      matmul_tile<<<grid, block, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
          static_cast<__nv_bfloat16*>(y->data), slot_rows, call->slots, n, k, splits);
    }
    status = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(slot_rows, stream);
  if (status != cudaSuccess) return fail(call, "matmul launch", status);
  if (freed != cudaSuccess) return fail(call, "cudaFreeAsync", freed);
  return BITCHECK_PLUGIN_OK;
}

}  // namespace

int example_plugin_run_fixed_order_cuda(const bitcheck_call* call, void*) {
  return launch(call, false);
}

int example_plugin_run_split_k_cuda(const bitcheck_call* call, void*) {
  return launch(call, true);
}
