// Kernels with one deliberate defect per compute-sanitizer tool: the control that proves a
// sanitizer run (tool + kernel filter) can fail. scripts/gpu-sanitize.sh runs each tool on its
// defect and requires an error report before it trusts a clean run of the sweep.
//   sanitizer_probe memcheck|racecheck|initcheck|synccheck|clean|tma-store|sentinel
// The kernels live in bitcheck::cuda like every kernel of bitcheck, so the script's kernel filter
// selects them exactly as it selects the real ones. "clean" launches a correct kernel: no tool may
// report it. "tma-store" is a question, not a control: the fixed-order GEMM (whose outputs are
// written by TMA stores alone on sm_90) fills a never-initialized buffer, the host downloads it and
// checks every value. Values right and initcheck reporting the download as uninitialized means
// initcheck does not record TMA-store writes.
// "sentinel" is the fix and its control: the same GEMM with BITCHECK_SENTINEL_WRITES=1 (Y filled
// with a sentinel by cudaMemset before the launch, every element checked after), into a buffer one
// row longer than Y, filled with the sentinel too. The download of Y must be clean under initcheck
// and its values right, and the check must count exactly the N elements of the row no launch wrote:
// proof that it finds an unwritten element, not just that it stays quiet.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "matmul/fixed_order_gemm.h"

namespace bitcheck::cuda {
namespace {

constexpr int kThreads = 64;  // two warps: racecheck sees hazards between warps

// memcheck: one element past the end of the allocation.
__global__ void out_of_bounds_store_kernel(float* data, int count) {
  data[count + threadIdx.x] = 1.0f;
}

// racecheck: every thread writes the same shared word with no barrier, then one thread reads it.
__global__ void shared_race_kernel(float* out) {
  volatile __shared__ float word;  // volatile: the read is a real shared-memory load
  word = static_cast<float>(threadIdx.x);
  if (threadIdx.x == 0) out[0] = word;
}

// initcheck: reads device memory nothing ever wrote.
__global__ void uninitialized_load_kernel(const float* never_written, float* out) {
  out[threadIdx.x] = never_written[threadIdx.x] + 1.0f;
}

// synccheck: a block barrier reached by only part of the block.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// No defect: stages through shared memory with a barrier, reads only what it wrote.
__global__ void clean_kernel(const float* in, float* out) {
  __shared__ float staged[kThreads];
  staged[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = staged[kThreads - 1 - threadIdx.x];
}

int report(const char* what, cudaError_t status) {
  std::printf("sanitizer_probe %s: %s\n", what, cudaGetErrorName(status));
  return 0;  // the verdict is the sanitizer's (--error-exitcode), not the probe's
}

}  // namespace

bool known_probe(const char* tool) {
  for (const char* name :
       {"memcheck", "racecheck", "initcheck", "synccheck", "clean", "tma-store", "sentinel"}) {
    if (std::strcmp(tool, name) == 0) return true;
  }
  return false;
}

// Y = X·Wᵀ with X and W all ones (bf16), K = 64: every element of Y is exactly 64. Once with a
// tile of each orientation (X as A: 64-column boxes; W as A: one box per consumer).
int run_tma_store() {
  constexpr int64_t M = 200, N = 192, K = 64;
  std::printf("sanitizer_probe tma-store: path %s\n", fixed_order_gemm_path(GemmDType::bf16));
  const uint16_t one = 0x3F80;  // bf16 1.0
  const std::vector<uint16_t> ones_x(M * K, one), ones_w(N * K, one);
  void *x = nullptr, *w = nullptr, *y = nullptr;
  if (cudaMalloc(&x, M * K * 2) != cudaSuccess || cudaMalloc(&w, N * K * 2) != cudaSuccess ||
      cudaMalloc(&y, M * N * 2) != cudaSuccess)
    return 3;
  cudaMemcpy(x, ones_x.data(), M * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(w, ones_w.data(), N * K * 2, cudaMemcpyHostToDevice);
  int wrong = 0;
  for (const detail::GemmTile& tile :
       {detail::GemmTile{128, 256, false}, detail::GemmTile{128, 192, true}}) {
    try {
      detail::fixed_order_gemm_tile(GemmDType::bf16, tile, x, w, y, M, N, K, nullptr);
    } catch (const std::exception& error) {  // not sm_90: no TMA stores to ask about
      std::printf("sanitizer_probe tma-store: %s\n", error.what());
      return 0;
    }
    std::vector<uint16_t> host(M * N);
    cudaMemcpy(host.data(), y, M * N * 2, cudaMemcpyDeviceToHost);  // the read initcheck judges
    int tile_wrong = 0;
    for (uint16_t value : host) tile_wrong += value != 0x4280;  // bf16 64.0
    std::printf("sanitizer_probe tma-store: tile %s: %d of %lld values wrong\n",
                tile.name().c_str(), tile_wrong, static_cast<long long>(M * N));
    wrong += tile_wrong;
    cudaFree(y);  // a fresh, never-written buffer for the next tile
    if (cudaMalloc(&y, M * N * 2) != cudaSuccess) return 3;
  }
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  report("tma-store", cudaDeviceSynchronize());
  return wrong == 0 ? 0 : 1;
}

int run_sentinel() {
  constexpr int64_t M = 200, N = 192, K = 64;
  setenv("BITCHECK_SENTINEL_WRITES", "1", 1);  // read once, at the GEMM's first launch
  const uint16_t one = 0x3F80;                 // bf16 1.0
  const std::vector<uint16_t> ones_x(M * K, one), ones_w(N * K, one);
  void *x = nullptr, *w = nullptr, *y = nullptr;
  if (cudaMalloc(&x, M * K * 2) != cudaSuccess || cudaMalloc(&w, N * K * 2) != cudaSuccess ||
      cudaMalloc(&y, (M + 1) * N * 2) != cudaSuccess)
    return 3;
  cudaMemcpy(x, ones_x.data(), M * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(w, ones_w.data(), N * K * 2, cudaMemcpyHostToDevice);
  int failures = 0;
  for (const detail::GemmTile& tile :
       {detail::GemmTile{128, 256, false}, detail::GemmTile{128, 192, true}}) {
    cudaMemset(y, 0xFF, (M + 1) * N * 2);  // row M: the sentinel, never written by the GEMM
    try {
      detail::fixed_order_gemm_tile(GemmDType::bf16, tile, x, w, y, M, N, K, nullptr);
    } catch (const std::exception& error) {  // not sm_90, or the check found a gap in Y
      std::printf("sanitizer_probe sentinel: tile %s: %s\n", tile.name().c_str(), error.what());
      if (!detail::fixed_order_gemm_sentinel_writes() || std::strstr(error.what(), "sm_90"))
        return 0;
      ++failures;
      continue;
    }
    std::vector<uint16_t> host(M * N);
    cudaMemcpy(host.data(), y, M * N * 2, cudaMemcpyDeviceToHost);  // initcheck must stay quiet
    int wrong = 0;
    for (uint16_t value : host) wrong += value != 0x4280;  // bf16 64.0
    const std::uint64_t found = detail::count_sentinel_elements(y, (M + 1) * N, nullptr);
    std::printf(
        "sanitizer_probe sentinel: tile %s: %d of %lld values wrong; the check found %llu "
        "sentinel elements in Y plus the unwritten row (expected exactly %lld)\n",
        tile.name().c_str(), wrong, static_cast<long long>(M * N),
        static_cast<unsigned long long>(found), static_cast<long long>(N));
    failures += wrong != 0 || found != static_cast<std::uint64_t>(N);
  }
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  report("sentinel", cudaDeviceSynchronize());
  return failures == 0 ? 0 : 1;
}

int run_probe(const char* tool) {
  if (std::strcmp(tool, "tma-store") == 0) return run_tma_store();
  if (std::strcmp(tool, "sentinel") == 0) return run_sentinel();
  float *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, kThreads * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&out, kThreads * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "sanitizer_probe: cudaMalloc failed\n");
    return 3;
  }
  if (cudaMemset(out, 0, kThreads * sizeof(float)) != cudaSuccess) return 3;
  if (std::strcmp(tool, "memcheck") == 0) {
    out_of_bounds_store_kernel<<<1, 1>>>(out, kThreads);
  } else if (std::strcmp(tool, "racecheck") == 0) {
    shared_race_kernel<<<1, kThreads>>>(out);
  } else if (std::strcmp(tool, "initcheck") == 0) {
    uninitialized_load_kernel<<<1, kThreads>>>(in, out);
  } else if (std::strcmp(tool, "synccheck") == 0) {
    divergent_barrier_kernel<<<1, kThreads>>>(out);
  } else {
    if (cudaMemset(in, 0, kThreads * sizeof(float)) != cudaSuccess) return 3;
    clean_kernel<<<1, kThreads>>>(in, out);
  }
  cudaError_t status = cudaDeviceSynchronize();
  cudaFree(in);
  cudaFree(out);
  return report(tool, status);
}

}  // namespace bitcheck::cuda

int main(int argc, char** argv) {
  if (argc != 2 || !bitcheck::cuda::known_probe(argv[1])) {
    std::fprintf(stderr,
                 "usage: sanitizer_probe "
                 "memcheck|racecheck|initcheck|synccheck|clean|tma-store|sentinel\n");
    return 2;
  }
  return bitcheck::cuda::run_probe(argv[1]);
}
