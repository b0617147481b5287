// gemm_probe: GPU check and benchmark of matmul/fixed-order. (a) bitwise invariance across M, row
// offset and repeat; (b) accuracy against an fp64 reference; (c) speed against cuBLASLt's top
// heuristic (32 MiB workspace, CUBLAS_COMPUTE_32F, same row-major layout), in one run.
// Usage: gemm_probe [--quick | --tiles]   (--quick skips the benchmark; --tiles only times every
// forced tile shape). Exit 0 all checks pass, 1 otherwise.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/runtime.h"
#include "matmul/fixed_order_gemm.h"

namespace bc = bitcheck::cuda;
using bc::GemmDType;

namespace {

int failures = 0;

const char* dtype_name(GemmDType t) {
  return t == GemmDType::bf16 ? "bf16" : t == GemmDType::fp16 ? "fp16" : "fp32";
}
size_t dtype_bytes(GemmDType t) {
  return t == GemmDType::fp32 ? 4 : 2;
}

__device__ uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), never zero after rounding to the dtype.
__global__ void fill_random(void* out, int dtype, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t bits = mix64(seed * 0x100000001B3ull + uint64_t(i));
    float v = float(int64_t(bits >> 40) - (int64_t(1) << 23)) / float(1 << 23);
    if (fabsf(v) < 1e-3f) v = 0.5f;
    if (dtype == 0)
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else if (dtype == 1)
      static_cast<__half*>(out)[i] = __float2half_rn(v);
    else
      static_cast<float*>(out)[i] = v;
  }
}

__device__ double load_as_double(const void* p, int dtype, int64_t i) {
  if (dtype == 0) return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
  if (dtype == 1) return double(__half2float(static_cast<const __half*>(p)[i]));
  return double(static_cast<const float*>(p)[i]);
}

// One warp per (sampled row, n): ref = Σ_k x·w in fp64, magnitude = Σ_k |x·w|.
__global__ void reference_rows(const void* x, const void* w, int dtype, const int64_t* rows,
                               int row_count, int64_t N, int64_t K, double* ref,
                               double* magnitude) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= int64_t(row_count) * N) return;
  const int64_t r = warp / N;
  const int64_t n = warp % N;
  const int64_t m = rows[r];
  double sum = 0.0;
  double abs_sum = 0.0;
  for (int64_t k = lane; k < K; k += 32) {
    const double p = load_as_double(x, dtype, m * K + k) * load_as_double(w, dtype, n * K + k);
    sum += p;
    abs_sum += fabs(p);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    abs_sum += __shfl_down_sync(0xffffffffu, abs_sum, offset);
  }
  if (lane == 0) {
    ref[r * N + n] = sum;
    magnitude[r * N + n] = abs_sum;
  }
}

float host_to_float(const std::vector<uint8_t>& bytes, GemmDType t, int64_t i) {
  if (t == GemmDType::fp32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  if (t == GemmDType::bf16) {
    uint32_t u = uint32_t(h) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
  // fp16 -> float (normal, subnormal, inf/nan)
  const uint32_t sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
  float v;
  if (exponent == 0)
    v = std::ldexp(float(mantissa), -24);
  else if (exponent == 31)
    v = mantissa ? NAN : INFINITY;
  else
    v = std::ldexp(float(mantissa | 1024), int(exponent) - 25);
  return sign ? -v : v;
}

void fill(bc::DeviceBuffer& buffer, GemmDType t, uint64_t seed) {
  const int64_t count = int64_t(buffer.bytes() / dtype_bytes(t));
  fill_random<<<1024, 256>>>(buffer.get(), int(t), count, seed);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

std::vector<uint8_t> download(const bc::DeviceBuffer& buffer, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  buffer.download(host.data(), bytes);
  return host;
}

using GemmFunction = std::function<void(GemmDType, const void*, const void*, void*, int64_t,
                                        int64_t, int64_t, CUstream_st*)>;
struct Gemm {
  std::string name;
  GemmFunction run;
};

// The wgmma path with the tile shape forced.
Gemm forced(const bc::detail::GemmTile& tile) {
  return {tile.name(), [tile](GemmDType t, const void* x, const void* w, void* y, int64_t M,
                              int64_t N, int64_t K, CUstream_st* stream) {
            bc::detail::fixed_order_gemm_tile(t, tile, x, w, y, M, N, K, stream);
          }};
}

// The automatic choice followed by every forced shape.
std::vector<Gemm> every_wgmma_shape() {
  std::vector<Gemm> gemms = {{"auto", bc::fixed_order_gemm}};
  for (const bc::detail::GemmTile& tile : bc::detail::fixed_order_gemm_tiles())
    gemms.push_back(forced(tile));
  return gemms;
}

struct Accuracy {
  double max_abs_err = 0, max_rel_err = 0, max_normalized = 0;
  bool nan = false;
};

// Compares `rows` of y (row-major, N columns) with the fp64 reference. normalized = |y-ref| /
// (u_out·|ref| + 2^-16·Σ|x·w|): <= 1 passes (one output rounding plus an fp32 accumulation error).
Accuracy check_accuracy(const bc::DeviceBuffer& x, const bc::DeviceBuffer& w,
                        const std::vector<uint8_t>& y, GemmDType t,
                        const std::vector<int64_t>& rows, int64_t N, int64_t K) {
  bc::DeviceBuffer rows_device(rows.size() * 8);
  rows_device.upload(rows.data(), rows.size() * 8);
  bc::DeviceBuffer ref(rows.size() * N * 8), magnitude(rows.size() * N * 8);
  const int64_t threads = int64_t(rows.size()) * N * 32;
  reference_rows<<<unsigned((threads + 255) / 256), 256>>>(
      x.get(), w.get(), int(t), rows_device.as<int64_t>(), int(rows.size()), N, K, ref.as<double>(),
      magnitude.as<double>());
  BITCHECK_CUDA_LAUNCH_CHECK();
  std::vector<double> ref_host(rows.size() * N), magnitude_host(rows.size() * N);
  ref.download(ref_host.data(), ref_host.size() * 8);
  magnitude.download(magnitude_host.data(), magnitude_host.size() * 8);
  const double u_out = t == GemmDType::bf16   ? std::ldexp(1.0, -8)
                       : t == GemmDType::fp16 ? std::ldexp(1.0, -11)
                                              : std::ldexp(1.0, -24);
  Accuracy a;
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t n = 0; n < N; ++n) {
      const double v = host_to_float(y, t, rows[r] * N + n);
      const double expected = ref_host[r * N + n];
      if (std::isnan(v)) a.nan = true;
      const double err = std::fabs(v - expected);
      a.max_abs_err = std::max(a.max_abs_err, err);
      if (std::fabs(expected) > 1e-2 * magnitude_host[r * N + n])
        a.max_rel_err = std::max(a.max_rel_err, err / std::fabs(expected));
      a.max_normalized = std::max(
          a.max_normalized,
          err / (u_out * std::fabs(expected) + std::ldexp(1.0, -16) * magnitude_host[r * N + n]));
    }
  return a;
}

// (a)+(b): full run at M_max with gemms[0], then sub-batches of M rows at several offsets, through
// every function in `gemms`, must reproduce the same rows bit for bit; the full run repeated must
// too (determinism).
void check_forward(const char* path_name, const std::vector<Gemm>& gemms, GemmDType t, int64_t N,
                   int64_t K, int64_t m_max, const std::vector<int64_t>& ms) {
  const GemmFunction& gemm = gemms[0].run;
  const size_t eb = dtype_bytes(t);
  bc::DeviceBuffer x(m_max * K * eb), w(N * K * eb), y_full(m_max * N * eb), y_sub(m_max * N * eb);
  fill(x, t, 11 + N + K);
  fill(w, t, 977 + N * 3 + K);
  y_full.fill_bytes(0xFF);
  gemm(t, x.get(), w.get(), y_full.get(), m_max, N, K, nullptr);
  bc::synchronize();
  const auto full = download(y_full, m_max * N * eb);
  gemm(t, x.get(), w.get(), y_full.get(), m_max, N, K, nullptr);
  bc::synchronize();
  const bool deterministic = download(y_full, m_max * N * eb) == full;

  int64_t compared_rows = 0, mismatched_rows = 0, batches = 0;
  std::string first_mismatch;
  std::vector<std::string> mismatching;  // the functions that mismatched anywhere
  for (int64_t m : ms) {
    if (m > m_max) continue;
    for (int64_t offset : {int64_t(0), (m_max - m) / 2 + 1, m_max - m})
      for (const Gemm& sub_gemm : gemms) {
        if (offset + m > m_max) continue;
        y_sub.fill_bytes(0xFF);
        sub_gemm.run(t, static_cast<const uint8_t*>(x.get()) + offset * K * eb, w.get(),
                     y_sub.get(), m, N, K, nullptr);
        bc::synchronize();
        const auto sub = download(y_sub, m * N * eb);
        ++batches;
        for (int64_t r = 0; r < m; ++r) {
          ++compared_rows;
          if (std::memcmp(sub.data() + r * N * eb, full.data() + (offset + r) * N * eb, N * eb) !=
              0) {
            if (mismatched_rows++ == 0)
              first_mismatch = sub_gemm.name + " M=" + std::to_string(m) +
                               " offset=" + std::to_string(offset) + " row=" + std::to_string(r);
            if (std::find(mismatching.begin(), mismatching.end(), sub_gemm.name) ==
                mismatching.end())
              mismatching.push_back(sub_gemm.name);
          }
        }
      }
  }
  std::vector<int64_t> rows;
  const int64_t sample = std::min<int64_t>(m_max, 24);
  for (int64_t i = 0; i < sample; ++i)
    rows.push_back(i * (m_max - 1) / std::max<int64_t>(sample - 1, 1));
  const Accuracy a = check_accuracy(x, w, full, t, rows, N, K);
  const bool ok = deterministic && mismatched_rows == 0 && !a.nan && a.max_normalized <= 1.0;
  if (!ok) ++failures;
  std::printf(
      "%-5s %-18s N=%-6lld K=%-6lld Mmax=%-5lld batches=%-3lld rows=%-6lld mismatched=%-4lld "
      "determ=%s max_abs=%.3g max_rel=%.3g norm=%.3f nan=%d %s %s\n",
      dtype_name(t), path_name, (long long)N, (long long)K, (long long)m_max, (long long)batches,
      (long long)compared_rows, (long long)mismatched_rows, deterministic ? "yes" : "NO",
      a.max_abs_err, a.max_rel_err, a.max_normalized, int(a.nan), ok ? "PASS" : "FAIL",
      first_mismatch.c_str());
  if (!mismatching.empty()) {
    std::printf("      mismatching:");
    for (const std::string& name : mismatching) std::printf(" [%s]", name.c_str());
    std::printf("\n");
  }
}

// dW: all T tokens in one call must equal the same tokens in consecutive micro-batches, bitwise;
// accuracy against dw0 + Σ_t dy·x in fp64.
void check_dw(GemmDType t, int64_t T, int64_t N, int64_t K) {
  const size_t eb = dtype_bytes(t);
  bc::DeviceBuffer dy(T * N * eb), x(T * K * eb), dw_once(N * K * 4), dw_split(N * K * 4);
  fill(dy, t, 5 + T);
  fill(x, t, 6 + T);
  fill(dw_once, GemmDType::fp32, 7);
  fill(dw_split, GemmDType::fp32, 7);
  const auto dw0 = download(dw_once, N * K * 4);
  bc::fixed_order_gemm_dw_accumulate(t, dy.get(), x.get(), dw_once.as<float>(), T, N, K, nullptr);
  const int64_t cuts[] = {0, 1, 17, T / 2, T - 3, T};
  for (int i = 0; i + 1 < 6; ++i) {
    const int64_t begin = cuts[i], count = cuts[i + 1] - cuts[i];
    if (count <= 0) continue;
    bc::fixed_order_gemm_dw_accumulate(t, static_cast<const uint8_t*>(dy.get()) + begin * N * eb,
                                       static_cast<const uint8_t*>(x.get()) + begin * K * eb,
                                       dw_split.as<float>(), count, N, K, nullptr);
  }
  bc::synchronize();
  const auto once = download(dw_once, N * K * 4);
  const bool equal = once == download(dw_split, N * K * 4);
  const auto dy_h = download(dy, T * N * eb), x_h = download(x, T * K * eb);
  double max_abs = 0, max_norm = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double sum = host_to_float(dw0, GemmDType::fp32, n * K + k), magnitude = std::fabs(sum);
      for (int64_t s = 0; s < T; ++s) {
        const double p =
            double(host_to_float(dy_h, t, s * N + n)) * host_to_float(x_h, t, s * K + k);
        sum += p;
        magnitude += std::fabs(p);
      }
      const double err = std::fabs(host_to_float(once, GemmDType::fp32, n * K + k) - sum);
      max_abs = std::max(max_abs, err);
      max_norm = std::max(max_norm, err / (std::ldexp(1.0, -16) * magnitude));
    }
  const bool ok = equal && max_norm <= 1.0;
  if (!ok) ++failures;
  std::printf(
      "%-5s dw_accumulate      T=%-5lld N=%-4lld K=%-4lld split_equal=%s max_abs=%.3g norm=%.3f "
      "%s\n",
      dtype_name(t), (long long)T, (long long)N, (long long)K, equal ? "yes" : "NO", max_abs,
      max_norm, ok ? "PASS" : "FAIL");
}

// ---- benchmark
// -----------------------------------------------------------------------------------
struct Lt {
  cublasLtHandle_t handle = nullptr;
  bc::DeviceBuffer workspace{32u << 20};
  Lt() { BITCHECK_CUDA_CALL(cublasLtCreate(&handle)); }
  ~Lt() { cublasLtDestroy(handle); }
};

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  ~LtPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Row-major Y[M,N] = X[M,K]·W[N,K]ᵀ is column-major Yᵀ[N,M] = op(W)ᵀ·Xᵀ: A = W (K x N, ld K,
// transposed), B = X (K x M, ld K), C = D = Y (N x M, ld N).
void make_plan(Lt& lt, LtPlan& plan, int64_t M, int64_t N, int64_t K) {
  BITCHECK_CUDA_CALL(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  BITCHECK_CUDA_CALL(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &transpose, sizeof(transpose)));
  BITCHECK_CUDA_CALL(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &no_transpose, sizeof(no_transpose)));
  BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, K, N, K));
  BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, K, M, K));
  BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t preference;
  BITCHECK_CUDA_CALL(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace_bytes = lt.workspace.bytes();
  BITCHECK_CUDA_CALL(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  int found = 0;
  BITCHECK_CUDA_CALL(cublasLtMatmulAlgoGetHeuristic(
      lt.handle, plan.op, plan.a, plan.b, plan.c, plan.c, preference, 1, &plan.heuristic, &found));
  cublasLtMatmulPreferenceDestroy(preference);
  if (found < 1) throw std::runtime_error("cuBLASLt heuristic found no algorithm");
}

void run_lt(Lt& lt, const LtPlan& plan, const void* x, const void* w, void* y) {
  const float alpha = 1.0f, beta = 0.0f;
  BITCHECK_CUDA_CALL(cublasLtMatmul(lt.handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y,
                                    plan.c, y, plan.c, &plan.heuristic.algo, lt.workspace.get(),
                                    lt.workspace.bytes(), nullptr));
}

// Median per-call times of two callables timed alternately (A, B, A, B, ...), so clock and
// thermal drift during the run weigh on both alike. Calls rotate over `sets` buffer sets.
template <typename A, typename B>
std::pair<double, double> median_ms_interleaved(A&& first, B&& second, int sets, int repeats) {
  for (int i = 0; i < 3; ++i) {
    first(i % sets);
    second(i % sets);
  }
  std::vector<cudaEvent_t> events(2 * repeats + 1);
  for (auto& e : events) BITCHECK_CUDA_CALL(cudaEventCreate(&e));
  BITCHECK_CUDA_CALL(cudaEventRecord(events[0]));
  for (int i = 0; i < repeats; ++i) {
    first(i % sets);
    BITCHECK_CUDA_CALL(cudaEventRecord(events[2 * i + 1]));
    second(i % sets);
    BITCHECK_CUDA_CALL(cudaEventRecord(events[2 * i + 2]));
  }
  BITCHECK_CUDA_CALL(cudaEventSynchronize(events[2 * repeats]));
  std::vector<float> times_first(repeats), times_second(repeats);
  for (int i = 0; i < repeats; ++i) {
    BITCHECK_CUDA_CALL(cudaEventElapsedTime(&times_first[i], events[2 * i], events[2 * i + 1]));
    BITCHECK_CUDA_CALL(
        cudaEventElapsedTime(&times_second[i], events[2 * i + 1], events[2 * i + 2]));
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::nth_element(times_first.begin(), times_first.begin() + repeats / 2, times_first.end());
  std::nth_element(times_second.begin(), times_second.begin() + repeats / 2, times_second.end());
  return {times_first[repeats / 2], times_second[repeats / 2]};
}

int sets_for(size_t bytes) {
  const size_t target = 256u << 20;
  return int(std::clamp<size_t>((target + bytes - 1) / bytes, 1, 8));
}

// Weights, inputs and outputs of an N x K GEMM for up to m_max rows, each in enough random sets to
// rotate through more than L2 holds; count is the number of distinct launches that takes.
struct RotatedBuffers {
  std::vector<bc::DeviceBuffer> w, x, y;
  int count = 0;
  RotatedBuffers(GemmDType t, int64_t N, int64_t K, int64_t m_max) {
    const int w_sets = sets_for(N * K * 2), x_sets = sets_for(m_max * K * 2),
              y_sets = sets_for(m_max * N * 2);
    for (int i = 0; i < w_sets; ++i) {
      w.emplace_back(N * K * 2);
      fill(w.back(), t, 100 + i);
    }
    for (int i = 0; i < x_sets; ++i) {
      x.emplace_back(m_max * K * 2);
      fill(x.back(), t, 200 + i);
    }
    for (int i = 0; i < y_sets; ++i) y.emplace_back(m_max * N * 2);
    count = std::max({w_sets, x_sets, y_sets});
  }
};

struct BenchRow {
  int64_t N, K, M;
  bc::detail::GemmTile chosen;
  double mine_tflops, lt_tflops;
  bool invariant;
};

bc::detail::GemmTile chosen_tile(int64_t M, int64_t N, int sm_count) {
  return bc::detail::fixed_order_gemm_chosen_tile(M, N, sm_count);
}

void bench_shape(Lt& lt, int sm_count, int64_t N, int64_t K, const std::vector<int64_t>& ms,
                 std::vector<BenchRow>& table) {
  const GemmDType t = GemmDType::bf16;
  const int64_t m_max = *std::max_element(ms.begin(), ms.end());
  RotatedBuffers buffers(t, N, K, m_max);
  std::vector<bc::DeviceBuffer>&w = buffers.w, &x = buffers.x, &y = buffers.y;
  const int w_sets = int(w.size()), x_sets = int(x.size()), y_sets = int(y.size()),
            sets = buffers.count;
  // Reference rows for the invariance check: the first 64 rows computed at M=64.
  const int64_t ref_rows = 64;
  bc::fixed_order_gemm(t, x[0].get(), w[0].get(), y[0].get(), ref_rows, N, K, nullptr);
  bc::synchronize();
  const auto reference = download(y[0], ref_rows * N * 2);
  // cuBLASLt agrees with us on those rows (checks the layout mapping; not bitwise).
  {
    LtPlan plan;
    make_plan(lt, plan, ref_rows, N, K);
    run_lt(lt, plan, x[0].get(), w[0].get(), y[0].get());
    bc::synchronize();
    const auto theirs = download(y[0], ref_rows * N * 2);
    double max_diff = 0, max_ref = 0;
    for (int64_t i = 0; i < ref_rows * N; ++i) {
      max_diff =
          std::max(max_diff,
                   double(std::fabs(host_to_float(theirs, t, i) - host_to_float(reference, t, i))));
      max_ref = std::max(max_ref, double(std::fabs(host_to_float(reference, t, i))));
    }
    std::printf(
        "  N=%lld K=%lld: max |fixed_order - cuBLASLt| over %lld rows = %.3g (max |y| %.3g)\n",
        (long long)N, (long long)K, (long long)ref_rows, max_diff, max_ref);
    if (!(max_diff <= 0.02 * max_ref)) ++failures;
  }
  for (int64_t m : ms) {
    bool invariant = true;
    const int64_t rows = std::min(m, ref_rows);
    for (const Gemm& gemm : every_wgmma_shape()) {
      y[0].fill_bytes(0xFF);
      gemm.run(t, x[0].get(), w[0].get(), y[0].get(), m, N, K, nullptr);
      bc::synchronize();
      invariant = invariant &&
                  download(y[0], rows * N * 2) ==
                      std::vector<uint8_t>(reference.begin(), reference.begin() + rows * N * 2);
    }
    if (!invariant) ++failures;
    const double flops = 2.0 * double(m) * double(N) * double(K);
    const int repeats = flops > 2e12 ? 21 : 31;
    LtPlan plan;
    make_plan(lt, plan, m, N, K);
    const auto [mine, theirs] = median_ms_interleaved(
        [&](int i) {
          bc::fixed_order_gemm(t, x[i % x_sets].get(), w[i % w_sets].get(), y[i % y_sets].get(), m,
                               N, K, nullptr);
        },
        [&](int i) {
          run_lt(lt, plan, x[i % x_sets].get(), w[i % w_sets].get(), y[i % y_sets].get());
        },
        sets, repeats);
    table.push_back({N, K, m, chosen_tile(m, N, sm_count), flops / mine * 1e-9,
                     flops / theirs * 1e-9, invariant});
    std::printf(
        "  N=%-6lld K=%-5lld M=%-5lld fixed_order %7.1f cuBLASLt %7.1f TFLOP/s ratio %.3f bits "
        "%s\n",
        (long long)N, (long long)K, (long long)m, table.back().mine_tflops, table.back().lt_tflops,
        table.back().mine_tflops / table.back().lt_tflops, invariant ? "same" : "DIFFER");
    std::fflush(stdout);
  }
}

// --tiles: every forced tile shape timed against the automatic choice on the benchmark shapes, to
// calibrate the wave costs in fixed_order_gemm.cu (time per wave of one tile per SM).
void time_tile_shapes(int sm_count) {
  const GemmDType t = GemmDType::bf16;
  const int64_t shapes[][2] = {
      {4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  const std::vector<int64_t> ms = {1,   16,   64,   100,  257,  320,  513,
                                   769, 1000, 1025, 2049, 2200, 4096, 4097};
  std::printf(
      "\n| N | K | M | tile | tiles | waves | median us | us per wave | auto tile | auto us "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& s : shapes) {
    const int64_t N = s[0], K = s[1], m_max = ms.back();
    RotatedBuffers buffers(t, N, K, m_max);
    std::vector<bc::DeviceBuffer>&w = buffers.w, &x = buffers.x, &y = buffers.y;
    const int w_sets = int(w.size()), x_sets = int(x.size()), y_sets = int(y.size()),
              sets = buffers.count;
    for (int64_t m : ms) {
      const bc::detail::GemmTile chosen = chosen_tile(m, N, sm_count);
      for (const bc::detail::GemmTile& tile : bc::detail::fixed_order_gemm_tiles()) {
        const auto [forced, automatic] = median_ms_interleaved(
            [&](int i) {
              bc::detail::fixed_order_gemm_tile(t, tile, x[i % x_sets].get(), w[i % w_sets].get(),
                                                y[i % y_sets].get(), m, N, K, nullptr);
            },
            [&](int i) {
              bc::fixed_order_gemm(t, x[i % x_sets].get(), w[i % w_sets].get(), y[i % y_sets].get(),
                                   m, N, K, nullptr);
            },
            sets, 15);
        const int64_t tiles = (m + tile.rows - 1) / tile.rows * ((N + tile.cols - 1) / tile.cols);
        const int64_t waves = (tiles + sm_count - 1) / sm_count;
        std::printf("| %lld | %lld | %lld | %s | %lld | %lld | %.1f | %.1f | %s | %.1f |\n",
                    (long long)N, (long long)K, (long long)m, tile.name().c_str(), (long long)tiles,
                    (long long)waves, forced * 1e3, forced * 1e3 / double(waves),
                    chosen.name().c_str(), automatic * 1e3);
      }
      std::fflush(stdout);
    }
  }
}

int run(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const bool tiles = argc > 1 && std::string(argv[1]) == "--tiles";
  const bc::DeviceInfo device = bc::query_device();
  if (!device.available) {
    std::printf("no GPU: %s\n", device.unavailable_reason.c_str());
    return 3;
  }
  std::printf("device: %s (%s, %d SMs), driver %d, runtime %d, cuBLASLt %zu\n", device.name.c_str(),
              device.arch().c_str(), device.sm_count, device.driver_version, device.runtime_version,
              device.cublaslt_version);
  std::printf("paths: bf16 %s, fp16 %s, fp32 %s\n", bc::fixed_order_gemm_path(GemmDType::bf16),
              bc::fixed_order_gemm_path(GemmDType::fp16),
              bc::fixed_order_gemm_path(GemmDType::fp32));

  if (tiles) {
    time_tile_shapes(device.sm_count);
    return 0;
  }
  std::printf(
      "\n== invariance (bitwise, sub-batches vs full batch) + accuracy (fp64 reference) ==\n");
  const std::vector<int64_t> ms_small = {1,  2,  3,   5,   8,   16,  17,  31,  63,
                                         64, 65, 127, 128, 129, 200, 255, 256, 300};
  const std::vector<int64_t> ms_big = {1, 3, 16, 64, 127, 128, 129, 256, 511, 1000, 1024};
  const bool hopper = std::string(bc::fixed_order_gemm_path(GemmDType::bf16)) != "portable-fma";
  // On sm_90 every sub-batch also runs with every forced tile shape.
  const std::vector<Gemm> main_path =
      hopper ? every_wgmma_shape() : std::vector<Gemm>{{"auto", bc::fixed_order_gemm}};
  const std::vector<Gemm> portable = {{"portable", bc::detail::fixed_order_gemm_portable}};
  for (GemmDType t : {GemmDType::bf16, GemmDType::fp16, GemmDType::fp32}) {
    const auto& forward = t == GemmDType::fp32 ? portable : main_path;
    const char* name = t == GemmDType::fp32 || !hopper ? "fixed_order(port)" : "fixed_order+shapes";
    check_forward(name, forward, t, 64, 128, 300, ms_small);
    check_forward(name, forward, t, 96, 200, 300, ms_small);
    check_forward(name, forward, t, 264, 72, 300, ms_small);
    check_forward(name, forward, t, 520, 1000, 700, ms_big);
    if (t != GemmDType::fp32) {
      check_forward(name, forward, t, 4096, 4096, 1100, ms_big);
      check_forward(name, forward, t, 1024, 14336, 300, {1, 64, 65, 129, 200});
      check_forward("portable", portable, t, 96, 200, 300, ms_small);
      check_forward("portable", portable, t, 520, 1000, 700, ms_big);
    }
  }
  for (GemmDType t : {GemmDType::bf16, GemmDType::fp16, GemmDType::fp32}) {
    check_dw(t, 300, 96, 200);
    check_dw(t, 70, 72, 136);
  }
  std::fflush(stdout);

  if (!quick) {
    std::printf("\n== bf16 speed vs cuBLASLt heuristic (median of >=20, rotating buffers) ==\n");
    Lt lt;
    std::vector<BenchRow> table;
    const std::vector<int64_t> ms = {1, 16, 64, 256, 512, 1024, 2048, 4096, 8192};
    const int64_t shapes[][2] = {
        {4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    for (const auto& s : shapes)
      bench_shape(lt, device.sm_count, s[0], s[1],
                  s[0] == 128256 ? std::vector<int64_t>{1, 16, 64, 256, 512, 1024, 2048, 4096} : ms,
                  table);
    std::printf(
        "\n| N | K | M | tile | fixed-order TFLOP/s | cuBLASLt TFLOP/s | ratio | bits vs M=64 "
        "(auto and every forced shape) |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : table)
      std::printf("| %lld | %lld | %lld | %s | %.1f | %.1f | %.3f | %s |\n", (long long)r.N,
                  (long long)r.K, (long long)r.M, r.chosen.name().c_str(), r.mine_tflops,
                  r.lt_tflops, r.mine_tflops / r.lt_tflops, r.invariant ? "same" : "DIFFER");
  }
  std::printf("\n%s (%d failing checks)\n", failures == 0 ? "ALL PASS" : "FAILURES", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gemm_probe: %s\n", error.what());
    return 3;
  }
}
