// GPU probe for the cuBLASLt layer: shows that the heuristic's rows drift with the batch size M
// while the pinned split-K-1 configuration's rows never do, and times pinned against heuristic.
// Usage: cublaslt_probe [--quick]   (--quick: one shape, fewer M; for a smoke test)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/runtime.h"
#include "matmul/cublaslt_gemm.h"
#include "matmul/cublaslt_search.h"

namespace bc = bitcheck::cuda;
using bc::GemmDType;
using bc::LtConfig;

namespace {

// ---- inputs -----------------------------------------------------------------------------------

__device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with full mantissas (so the K-sum order shows in the bits), never zero.
template <typename T>
__global__ void fill_random(T* out, std::size_t count, uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const uint64_t bits = mix(seed * 0x9e3779b97f4a7c15ULL + i);
    float value = float(bits >> 40) * (2.0f / float(1 << 24)) - 1.0f;
    if (std::fabs(value) < 1e-3f) value = 0.5f;
    out[i] = T(value);
  }
}

std::size_t element_bytes(GemmDType dtype) {
  return dtype == GemmDType::fp32 ? 4 : 2;
}
const char* name(GemmDType dtype) {
  return dtype == GemmDType::bf16 ? "bf16" : dtype == GemmDType::fp16 ? "fp16" : "fp32";
}

void fill(GemmDType dtype, void* data, std::size_t count, uint64_t seed) {
  switch (dtype) {
    case GemmDType::bf16:
      fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(data), count, seed);
      break;
    case GemmDType::fp16:
      fill_random<<<1024, 256>>>(static_cast<__half*>(data), count, seed);
      break;
    case GemmDType::fp32:
      fill_random<<<1024, 256>>>(static_cast<float*>(data), count, seed);
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

float to_float(GemmDType dtype, const std::vector<unsigned char>& bytes, std::size_t i) {
  if (dtype == GemmDType::fp32) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  if (dtype == GemmDType::bf16) {
    const uint32_t widened = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &widened, 4);
    return f;
  }
  __half_raw raw;
  raw.x = h;
  return __half2float(__half(raw));
}

std::vector<unsigned char> download(const void* device, std::size_t bytes) {
  std::vector<unsigned char> host(bytes);
  BITCHECK_CUDA_CALL(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  return host;
}

const unsigned char* offset(const void* base, std::size_t bytes) {
  return static_cast<const unsigned char*>(base) + bytes;
}

// ---- comparison -------------------------------------------------------------------------------

struct RowDiff {
  int mismatched_rows = 0;
  double max_abs_diff = 0;
};

void compare_row(GemmDType dtype, const std::vector<unsigned char>& row,
                 const std::vector<unsigned char>& reference, std::size_t columns, RowDiff& diff) {
  if (row == reference) return;
  ++diff.mismatched_rows;
  for (std::size_t c = 0; c < columns; ++c) {
    const double d = std::fabs(double(to_float(dtype, row, c)) - to_float(dtype, reference, c));
    diff.max_abs_diff = std::max(diff.max_abs_diff, d);
  }
}

std::string drift_text(const RowDiff& diff) {
  if (diff.mismatched_rows == 0) return "no";
  char text[64];
  std::snprintf(text, sizeof(text), "YES %d rows, %.3g", diff.mismatched_rows, diff.max_abs_diff);
  return text;
}

// Largest |y - ref| / (unit roundoff of the output * |ref| + 1e-6 * sum |a_i b_i|): <= 1 passes.
struct Accuracy {
  double worst_ratio = 0;
  void add(double value, double reference, double abs_sum, GemmDType output_dtype) {
    const double unit = output_dtype == GemmDType::bf16   ? std::ldexp(1.0, -8)
                        : output_dtype == GemmDType::fp16 ? std::ldexp(1.0, -11)
                                                          : std::ldexp(1.0, -23);
    const double bound = unit * std::fabs(reference) + 1e-6 * abs_sum + 1e-30;
    worst_ratio = std::max(worst_ratio, std::fabs(value - reference) / bound);
  }
};

// ---- timing -----------------------------------------------------------------------------------

template <typename Launch>
double median_us(Launch launch, int warmup = 3, int repeats = 25) {
  for (int i = 0; i < warmup; ++i) launch(i);
  bc::EventTimer timer;
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) {
    timer.start();
    launch(warmup + i);
    samples.push_back(1000.0 * timer.stop_ms());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Device buffers for one shape: W copies and two row-input / output copies, so the timed
// launches rotate through more memory than L2 holds; copy 0 is the one whose bits are checked.
struct ShapeBuffers {
  std::vector<bc::DeviceBuffer> w, x, y;
  bc::DeviceBuffer workspace{64u << 20};
  ShapeBuffers(GemmDType dtype, std::size_t w_elements, int64_t in_cols, int64_t out_cols,
               int64_t max_m, std::size_t l2_bytes) {
    const std::size_t e = element_bytes(dtype);
    const std::size_t w_bytes = w_elements * e;
    const std::size_t w_copies =
        std::clamp<std::size_t>((3 * l2_bytes + w_bytes - 1) / w_bytes, 1, 6);
    for (std::size_t i = 0; i < w_copies; ++i) {
      w.emplace_back(w_bytes);
      fill(dtype, w.back().get(), w_elements, 1 + i);
    }
    for (int i = 0; i < 2; ++i) {
      x.emplace_back(std::size_t(max_m) * in_cols * e);
      fill(dtype, x.back().get(), std::size_t(max_m) * in_cols, 100 + i);
      y.emplace_back(std::size_t(max_m) * out_cols * e);
    }
  }
};

// ---- forward: drift and timing over M ---------------------------------------------------------

struct Row {
  int64_t M;
  int heuristic_index;
  RowDiff heuristic, pinned;
  double heuristic_us, pinned_us;
};

const std::vector<int64_t> kRowsAll = {1,   2,   3,   7,   16,   31,   32,   33,   64,
                                       100, 255, 256, 257, 1000, 1024, 2048, 4096, 8192};
const std::vector<int64_t> kRowsQuick = {1, 7, 64, 257, 1024};
const std::vector<int64_t> kSampleRows = {0, 1, 2, 6, 31, 100, 255, 999, 4095, 8191};

// Bitwise drift of each sampled row against the same row computed alone (M = 1 at that row).
template <typename Gemm>
RowDiff drift_against_alone(Gemm gemm, GemmDType dtype, const ShapeBuffers& b, int64_t M,
                            int64_t columns,
                            const std::map<int64_t, std::vector<unsigned char>>& alone) {
  const std::size_t e = element_bytes(dtype);
  gemm(b.x[0].get(), b.w[0].get(), b.y[0].get(), M);
  RowDiff diff;
  for (const auto& [r, reference] : alone) {
    if (r >= M) continue;
    compare_row(dtype, download(offset(b.y[0].get(), r * columns * e), columns * e), reference,
                columns, diff);
  }
  return diff;
}

template <typename Gemm>
std::map<int64_t, std::vector<unsigned char>> rows_alone(Gemm gemm_alone, GemmDType dtype,
                                                         const ShapeBuffers& b, int64_t K,
                                                         int64_t columns, int64_t max_m) {
  const std::size_t e = element_bytes(dtype);
  std::map<int64_t, std::vector<unsigned char>> alone;
  for (const int64_t r : kSampleRows) {
    if (r >= max_m) continue;
    gemm_alone(offset(b.x[0].get(), r * K * e), b.w[0].get(), b.y[1].get());
    alone[r] = download(b.y[1].get(), columns * e);
  }
  return alone;
}

void print_configs(const char* label, const std::vector<LtConfig>& configs) {
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::printf("  %s[%zu] %s\n", label, i, configs[i].describe().c_str());
  }
}

int index_of(std::vector<LtConfig>& distinct, const LtConfig& config) {
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    if (distinct[i].same_kernel(config)) return int(i);
  }
  distinct.push_back(config);
  return int(distinct.size() - 1);
}

// Forward Y = X·Wᵀ (lt_gemm) or input gradient dX = dY·W (lt_gemm_nn) over the M list.
bool probe_over_m(bc::LtGemmForm form, GemmDType dtype, int64_t N, int64_t K,
                  const std::vector<int64_t>& m_list, std::size_t l2_bytes, bool check_accuracy) {
  const bool forward = form == bc::LtGemmForm::forward;
  // Forward: X[M,K] -> Y[M,N]. Input gradient: dY[M,N] -> dX[M,K]; the buffer called x holds the
  // GEMM's row input (K or N columns), y its output.
  const int64_t in_cols = forward ? K : N;
  const int64_t out_cols = forward ? N : K;
  const int64_t max_m = *std::max_element(m_list.begin(), m_list.end());
  const std::size_t e = element_bytes(dtype);

  const auto t0 = std::chrono::steady_clock::now();
  const LtConfig pinned = forward ? bc::lt_derive_pinned_config(dtype, N, K)
                                  : bc::lt_derive_pinned_config_nn(dtype, N, K);
  const double derive_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n== %s %s N=%lld K=%lld  pinned (derived in %.1f ms): %s\n", bc::to_string(form),
              name(dtype), (long long)N, (long long)K, derive_ms, pinned.describe().c_str());

  ShapeBuffers b(dtype, std::size_t(N) * K, in_cols, out_cols, max_m, l2_bytes);
  void* ws = b.workspace.get();
  const std::size_t ws_bytes = b.workspace.bytes();
  auto run = [&](const LtConfig& c, const void* in, const void* w, void* out, int64_t M) {
    if (forward) {
      bc::lt_gemm(c, dtype, in, w, out, M, N, K, ws, ws_bytes, nullptr);
    } else {
      bc::lt_gemm_nn(c, dtype, in, w, out, M, N, K, ws, ws_bytes, nullptr);
    }
  };
  auto heuristic_for = [&](int64_t M) {
    return forward ? bc::lt_heuristic_config(dtype, M, N, K)
                   : bc::lt_heuristic_config_nn(dtype, M, N, K);
  };

  const LtConfig heuristic_alone = heuristic_for(1);
  const auto alone_heuristic = rows_alone(
      [&](const void* in, const void* w, void* out) { run(heuristic_alone, in, w, out, 1); }, dtype,
      b, in_cols, out_cols, max_m);
  const auto alone_pinned =
      rows_alone([&](const void* in, const void* w, void* out) { run(pinned, in, w, out, 1); },
                 dtype, b, in_cols, out_cols, max_m);

  std::vector<LtConfig> distinct;
  std::vector<Row> rows;
  bool pinned_ok = true;
  for (const int64_t M : m_list) {
    const LtConfig heuristic = heuristic_for(M);
    Row row{M, index_of(distinct, heuristic), {}, {}, 0, 0};
    row.heuristic = drift_against_alone(
        [&](const void* in, const void* w, void* out, int64_t m) { run(heuristic, in, w, out, m); },
        dtype, b, M, out_cols, alone_heuristic);
    row.pinned = drift_against_alone(
        [&](const void* in, const void* w, void* out, int64_t m) { run(pinned, in, w, out, m); },
        dtype, b, M, out_cols, alone_pinned);
    pinned_ok = pinned_ok && row.pinned.mismatched_rows == 0;
    auto timed = [&](const LtConfig& c) {
      return median_us([&](int i) {
        run(c, b.x[i % b.x.size()].get(), b.w[i % b.w.size()].get(), b.y[i % b.y.size()].get(), M);
      });
    };
    row.heuristic_us = timed(heuristic);
    row.pinned_us = timed(pinned);
    rows.push_back(row);
  }

  std::printf("  %6s %5s %-22s %-22s %10s %10s %7s\n", "M", "heur", "heuristic drift",
              "pinned drift", "heur_us", "pinned_us", "ratio");
  for (const Row& r : rows) {
    std::printf("  %6lld %5d %-22s %-22s %10.1f %10.1f %7.2f\n", (long long)r.M, r.heuristic_index,
                drift_text(r.heuristic).c_str(), drift_text(r.pinned).c_str(), r.heuristic_us,
                r.pinned_us, r.pinned_us / r.heuristic_us);
  }
  std::printf("  heuristic picked %zu distinct configs over %zu M values:\n", distinct.size(),
              m_list.size());
  print_configs("heur", distinct);

  if (check_accuracy) {
    // Row 0 and row M-1 of the largest M against a double-precision CPU product.
    const int64_t M = max_m;
    run(pinned, b.x[0].get(), b.w[0].get(), b.y[0].get(), M);
    const auto w_host = download(b.w[0].get(), std::size_t(N) * K * e);
    Accuracy accuracy;
    for (const int64_t r : {int64_t(0), M - 1}) {
      const auto in_row = download(offset(b.x[0].get(), r * in_cols * e), in_cols * e);
      const auto out_row = download(offset(b.y[0].get(), r * out_cols * e), out_cols * e);
      for (int64_t c = 0; c < out_cols; ++c) {
        double sum = 0, abs_sum = 0;
        for (int64_t i = 0; i < in_cols; ++i) {
          // Forward: W[c, i]; input gradient: W[i, c].
          const std::size_t wi = forward ? std::size_t(c) * K + i : std::size_t(i) * K + c;
          const double p = double(to_float(dtype, in_row, i)) * to_float(dtype, w_host, wi);
          sum += p;
          abs_sum += std::fabs(p);
        }
        accuracy.add(to_float(dtype, out_row, c), sum, abs_sum, dtype);
      }
    }
    std::printf(
        "  accuracy (pinned, rows 0 and %lld of M=%lld vs fp64 CPU): worst err/bound "
        "%.3f %s\n",
        (long long)(M - 1), (long long)M, accuracy.worst_ratio,
        accuracy.worst_ratio <= 1.0 ? "ok" : "FAIL");
    pinned_ok = pinned_ok && accuracy.worst_ratio <= 1.0;
  }
  return pinned_ok;
}

// ---- weight gradient chunk --------------------------------------------------------------------

bool probe_weight_grad(GemmDType dtype, int64_t N, int64_t K, int64_t T) {
  const LtConfig pinned = bc::lt_derive_pinned_config_dw(dtype, N, K, T);
  const LtConfig heuristic = bc::lt_heuristic_config_dw(dtype, N, K, T);
  std::printf("\n== weight_grad %s N=%lld K=%lld T=%lld\n  pinned:    %s\n  heuristic: %s\n",
              name(dtype), (long long)N, (long long)K, (long long)T, pinned.describe().c_str(),
              heuristic.describe().c_str());
  const std::size_t e = element_bytes(dtype);
  const int chunks = 4;
  bc::DeviceBuffer dy(std::size_t(chunks) * T * N * e), x(std::size_t(chunks) * T * K * e);
  fill(dtype, dy.get(), std::size_t(chunks) * T * N, 3);
  fill(dtype, x.get(), std::size_t(chunks) * T * K, 4);
  bc::DeviceBuffer dw(std::size_t(N) * K * 4), workspace(64u << 20);
  auto sum_chunks = [&](const LtConfig& c) {
    for (int i = 0; i < chunks; ++i) {
      bc::lt_gemm_dw_chunk(c, dtype, offset(dy.get(), std::size_t(i) * T * N * e),
                           offset(x.get(), std::size_t(i) * T * K * e), dw.as<float>(), T, N, K,
                           i > 0, workspace.get(), workspace.bytes(), nullptr);
    }
    return download(dw.get(), dw.bytes());
  };
  const auto first = sum_chunks(pinned);
  const bool deterministic = first == sum_chunks(pinned);
  // Accuracy of a few dW rows: dW[n, k] = sum over all chunk tokens t of dY[t, n] X[t, k].
  const auto dy_host = download(dy.get(), dy.bytes());
  const auto x_host = download(x.get(), x.bytes());
  Accuracy accuracy;
  for (const int64_t n : {int64_t(0), N / 2, N - 1}) {
    for (int64_t k = 0; k < K; ++k) {
      double sum = 0, abs_sum = 0;
      for (int64_t t = 0; t < chunks * T; ++t) {
        const double p = double(to_float(dtype, dy_host, std::size_t(t) * N + n)) *
                         to_float(dtype, x_host, std::size_t(t) * K + k);
        sum += p;
        abs_sum += std::fabs(p);
      }
      float value;
      std::memcpy(&value, first.data() + 4 * (std::size_t(n) * K + k), 4);
      accuracy.add(value, sum, abs_sum, GemmDType::fp32);
    }
  }
  const double pinned_us = median_us([&](int) {
    bc::lt_gemm_dw_chunk(pinned, dtype, dy.get(), x.get(), dw.as<float>(), T, N, K, false,
                         workspace.get(), workspace.bytes(), nullptr);
  });
  const double heuristic_us = median_us([&](int) {
    bc::lt_gemm_dw_chunk(heuristic, dtype, dy.get(), x.get(), dw.as<float>(), T, N, K, false,
                         workspace.get(), workspace.bytes(), nullptr);
  });
  std::printf(
      "  %d chunks summed twice: %s; accuracy (3 rows vs fp64 CPU) worst err/bound %.3f "
      "%s; per chunk pinned %.1f us, heuristic %.1f us, ratio %.2f\n",
      chunks, deterministic ? "identical" : "DIFFERENT", accuracy.worst_ratio,
      accuracy.worst_ratio <= 1.0 ? "ok" : "FAIL", pinned_us, heuristic_us,
      pinned_us / heuristic_us);
  return deterministic && accuracy.worst_ratio <= 1.0;
}

// ---- configuration plumbing -------------------------------------------------------------------

bool probe_enumeration_and_fields(int64_t N, int64_t K) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto configs = bc::lt_enumerate_configs(GemmDType::bf16, 256, N, K, 300);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::set<int32_t> algos;
  int unsplit = 0;
  bool round_trips = true;
  for (const LtConfig& c : configs) {
    algos.insert(c.algo_id);
    unsplit += c.splitk_num == 1;
    const LtConfig back = LtConfig::from_fields(c.fields());
    round_trips = round_trips && back.same_kernel(c) && back.workspace_bytes == c.workspace_bytes;
  }
  std::printf(
      "\n== enumeration bf16 M=256 N=%lld K=%lld: %zu configs (%d split-K 1, %zu algo ids) "
      "in %.0f ms; fields() round trip %s\n",
      (long long)N, (long long)K, configs.size(), unsplit, algos.size(), ms,
      round_trips ? "ok" : "FAILED");
  for (std::size_t i = 0; i < configs.size() && i < 4; ++i) {
    std::printf("  enum[%zu] %s\n", i, configs[i].describe().c_str());
  }
  return round_trips && !configs.empty();
}

// Whether LtConfig captures everything: for the forward form, the heuristic's own algo and the
// algo rebuilt from the recorded fields must be the same bytes. Talks to cuBLASLt directly (with
// the same column-major mapping as the layer) so the layer is not checking itself.
int heuristic_algos_not_reproduced(GemmDType dtype, int64_t N, int64_t K,
                                   const std::vector<int64_t>& m_list) {
  const cudaDataType_t type = dtype == GemmDType::bf16   ? CUDA_R_16BF
                              : dtype == GemmDType::fp16 ? CUDA_R_16F
                                                         : CUDA_R_32F;
  cublasLtHandle_t handle;
  BITCHECK_CUDA_CALL(cublasLtCreate(&handle));
  cublasLtMatmulDesc_t desc;
  BITCHECK_CUDA_CALL(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  BITCHECK_CUDA_CALL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                                    sizeof(transpose)));
  cublasLtMatmulPreference_t preference;
  BITCHECK_CUDA_CALL(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = 32u << 20;
  BITCHECK_CUDA_CALL(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  int mismatches = 0;
  for (const int64_t M : m_list) {
    cublasLtMatrixLayout_t a, b, d;
    BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&a, type, K, N, K));
    BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&b, type, K, M, K));
    BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&d, type, N, M, N));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    BITCHECK_CUDA_CALL(cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, preference, 1,
                                                      &result, &returned));
    const LtConfig c = bc::lt_heuristic_config(dtype, M, N, K);
    cublasLtMatmulAlgo_t rebuilt{};
    BITCHECK_CUDA_CALL(cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, type, type,
                                              type, type, c.algo_id, &rebuilt));
    auto set = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, auto value) {
      BITCHECK_CUDA_CALL(
          cublasLtMatmulAlgoConfigSetAttribute(&rebuilt, attribute, &value, sizeof(value)));
    };
    set(CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile_id);
    set(CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages_id);
    set(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.splitk_num);
    set(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction_scheme);
    set(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.cta_swizzling);
    set(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom_option);
    set(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape_id);
    set(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape_id);
    if (returned != 1 || std::memcmp(&rebuilt, &result.algo, sizeof(rebuilt)) != 0) {
      ++mismatches;
      std::printf("  M=%lld: heuristic algo bytes differ from the rebuilt %s\n", (long long)M,
                  c.describe().c_str());
    }
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  return mismatches;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    const bc::DeviceInfo device = bc::query_device();
    if (!device.available) {
      std::fprintf(stderr, "no GPU: %s\n", device.unavailable_reason.c_str());
      return 3;
    }
    std::printf("device %s (%s, %d SMs, L2 %zu MiB), driver %d, runtime %d, cuBLASLt %zu\n",
                device.name.c_str(), device.arch().c_str(), device.sm_count,
                device.l2_cache_bytes >> 20, device.driver_version, device.runtime_version,
                device.cublaslt_version);
    const std::size_t l2 = device.l2_cache_bytes;
    const std::vector<std::pair<int64_t, int64_t>> shapes =
        quick ? std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}}
              : std::vector<std::pair<int64_t, int64_t>>{
                    {4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    const auto& m_list = quick ? kRowsQuick : kRowsAll;
    bool ok = probe_enumeration_and_fields(4096, 4096);
    for (const auto& [N, K] : shapes) {
      const int missed = heuristic_algos_not_reproduced(GemmDType::bf16, N, K, m_list);
      std::printf("heuristic algo rebuilt from LtConfig, N=%lld K=%lld: %s\n", (long long)N,
                  (long long)K, missed == 0 ? "identical bytes at every M" : "DIFFERS");
    }
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      ok = probe_over_m(bc::LtGemmForm::forward, GemmDType::bf16, shapes[i].first, shapes[i].second,
                        m_list, l2, i == 0) &&
           ok;
    }
    for (const GemmDType dtype : {GemmDType::fp16, GemmDType::fp32}) {
      ok = probe_over_m(bc::LtGemmForm::forward, dtype, 4096, 4096, kRowsQuick, l2, true) && ok;
    }
    ok = probe_over_m(bc::LtGemmForm::input_grad, GemmDType::bf16, 4096, 4096, kRowsQuick, l2,
                      true) &&
         ok;
    ok = probe_weight_grad(GemmDType::bf16, 4096, 4096, 256) && ok;
    std::printf("\n%s\n",
                ok ? "PROBE OK: pinned rows identical at every M, accurate" : "PROBE FAILED");
    return ok ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 3;
  }
}
