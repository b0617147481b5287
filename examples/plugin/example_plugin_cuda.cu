// The example plugin's CUDA matmul (y = x w^T): one thread per output element sums K in index
// order, so a row's arithmetic is the same whatever the batch, its position or its padding. The
// tensors are device pointers; the launch goes on the call's stream.
#include <bitcheck/plugin.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

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

template <typename T>
__global__ void fixed_order_matmul(const T* x, const T* w, T* y, const long long* slot_rows,
                                   long long slots, long long n, long long k) {
  const long long slot = blockIdx.y;
  const long long col = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (slot >= slots || col >= n || slot_rows[slot] < 0) return;
  float sum = 0.0f;
  for (long long i = 0; i < k; ++i) sum += to_float(x[slot * k + i]) * to_float(w[col * k + i]);
  y[slot * n + col] = from_float<T>(sum);
}

const bitcheck_tensor* find(const bitcheck_call* call, const char* name) {
  for (int i = 0; i < call->tensor_count; ++i) {
    if (std::strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  }
  return nullptr;
}

}  // namespace

int example_plugin_run_fixed_order_cuda(const bitcheck_call* call, void*) {
  const bitcheck_tensor* x = find(call, "x");
  const bitcheck_tensor* w = find(call, "w");
  const bitcheck_tensor* y = find(call, "y");
  if (!x || !w || !y || call->slots == 0) return BITCHECK_PLUGIN_OK;
  const long long n = w->rows, k = w->row_stride;
  long long* slot_rows = nullptr;
  const size_t map_bytes = sizeof(long long) * static_cast<size_t>(call->slots);
  auto stream = static_cast<cudaStream_t>(call->stream);
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&slot_rows), map_bytes, stream);
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(slot_rows, call->slot_rows, map_bytes, cudaMemcpyHostToDevice, stream);
  }
  if (status == cudaSuccess) {
    const dim3 block(128);
    const dim3 grid(static_cast<unsigned>((n + 127) / 128), static_cast<unsigned>(call->slots));
    if (std::strcmp(call->dtype, "fp32") == 0) {
      fixed_order_matmul<<<grid, block, 0, stream>>>(
          static_cast<const float*>(x->data), static_cast<const float*>(w->data),
          static_cast<float*>(y->data), slot_rows, call->slots, n, k);
    } else {
      fixed_order_matmul<<<grid, block, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
          static_cast<__nv_bfloat16*>(y->data), slot_rows, call->slots, n, k);
    }
    status = cudaGetLastError();
  }
  if (slot_rows) cudaFreeAsync(slot_rows, stream);
  if (status != cudaSuccess) {
    std::snprintf(call->error, call->error_capacity, "%s", cudaGetErrorString(status));
    return BITCHECK_PLUGIN_ERROR;
  }
  return BITCHECK_PLUGIN_OK;
}
