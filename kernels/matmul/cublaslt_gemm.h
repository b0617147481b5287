// cuBLASLt GEMMs run with an explicit, recordable algorithm configuration (LtConfig): the library
// heuristic (the control), a pinned split-K-1 configuration derived once per (N, K). The tuner
// (apps/tuner/) searches configurations through cublaslt_search.h and gemm_rig.h.
//
// Layouts are row-major from the caller's view; all three forms accumulate in fp32
// (CUBLAS_COMPUTE_32F, never TF32 for fp32 inputs), scale in fp32 and keep the order of the K sum
// fixed by the configuration alone:
//   forward      Y[M,N]  = X[M,K] · W[N,K]ᵀ      output in the input dtype
//   input_grad   dX[M,K] = dY[M,N] · W[N,K]      output in the input dtype
//   weight_grad  dW[N,K] = dY[T,N]ᵀ · X[T,K]     output fp32 (one chunk of T tokens)
// Plain C++: no CUDA or cuBLAS headers, so host code can hold and record configurations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gemm_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

// Every cuBLASLt setting that decides which kernel runs (the CUBLASLT_ALGO_CONFIG_* attributes),
// plus the workspace that kernel needs. Two equal configurations run the same kernel with the
// same K-sum order on the same cuBLASLt version and GPU.
struct LtConfig {
  int32_t algo_id = -1;           // CUBLASLT_ALGO_CONFIG_ID
  uint32_t tile_id = 0;           // cublasLtMatmulTile_t
  uint32_t stages_id = 0;         // cublasLtMatmulStages_t
  int32_t splitk_num = 1;         // number of K splits; 1 keeps the K sum in one sequence
  uint32_t reduction_scheme = 0;  // cublasLtReductionScheme_t of the split-K partial sums
  uint32_t cta_swizzling = 0;     // 0 or 1
  uint32_t custom_option = 0;     // algorithm-specific, 0..CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX
  uint16_t cluster_shape_id = 0;  // cublasLtClusterShape_t
  uint16_t inner_shape_id = 0;    // cublasLtMatmulInnerShape_t
  uint64_t workspace_bytes = 0;   // needed by this kernel (for a pinned config: at any M)

  // e.g. "algo=66 tile=128x256 stages=64xauto splitk=1 reduction=none swizzle=0 custom=0
  // cluster=1x2x1 inner=undefined workspace=0"
  std::string describe() const;
  // Flat named integers for JSON; from_fields throws std::invalid_argument naming a missing,
  // unknown, duplicated or out-of-range field.
  std::vector<std::pair<std::string, int64_t>> fields() const;
  static LtConfig from_fields(const std::vector<std::pair<std::string, int64_t>>& fields);
  // True when both select the same kernel (every field but workspace_bytes, which a heuristic
  // reports per shape).
  bool same_kernel(const LtConfig& other) const;
};

enum class LtGemmForm { forward, input_grad, weight_grad };
const char* to_string(LtGemmForm form);

// The library default for one shape: top cublasLtMatmulAlgoGetHeuristic result with default
// preferences and 32 MiB of workspace. Depends on M by design (the control).
LtConfig lt_heuristic_config(GemmDType dtype, int64_t M, int64_t N, int64_t K);
LtConfig lt_heuristic_config_nn(GemmDType dtype, int64_t M, int64_t N, int64_t K);
LtConfig lt_heuristic_config_dw(GemmDType dtype, int64_t N, int64_t K, int64_t T);

// Pinned configurations: split-K 1, reduction none, chosen from the heuristic at a large M and
// checked with cublasLtMatmulAlgoCheck at every M in lt_pinned_checked_rows(); never depends on
// the M of a call. Throws bitcheck::cuda::CudaError when no candidate qualifies.
LtConfig lt_derive_pinned_config(GemmDType dtype, int64_t N, int64_t K);
LtConfig lt_derive_pinned_config_nn(GemmDType dtype, int64_t N, int64_t K);
// The weight-gradient chunk always has T tokens, so its configuration is checked at T only.
LtConfig lt_derive_pinned_config_dw(GemmDType dtype, int64_t N, int64_t K, int64_t T);
// The M values (1..16384) at which a pinned forward / input_grad configuration was checked.
const std::vector<int64_t>& lt_pinned_checked_rows();

// Whether cuBLASLt accepts `config` for this form, dtype and shape; on success writes the
// workspace the kernel needs. Never throws for a rejected config.
bool lt_config_supports(const LtConfig& config, LtGemmForm form, GemmDType dtype, int64_t M,
                        int64_t N, int64_t K, std::size_t* workspace_bytes_needed = nullptr);

// Y[M,N] = X[M,K] · W[N,K]ᵀ with exactly `config`. Throws CudaError when cuBLASLt rejects the
// config for this shape, std::invalid_argument for a bad shape or too small a workspace.
void lt_gemm(const LtConfig& config, GemmDType dtype, const void* x, const void* w, void* y,
             int64_t M, int64_t N, int64_t K, void* workspace, std::size_t workspace_bytes,
             CUstream_st* stream);

// dX[M,K] = dY[M,N] · W[N,K] with exactly `config`.
void lt_gemm_nn(const LtConfig& config, GemmDType dtype, const void* dy, const void* w, void* dx,
                int64_t M, int64_t N, int64_t K, void* workspace, std::size_t workspace_bytes,
                CUstream_st* stream);

// dW_chunk[N,K] (fp32) = dY[T,N]ᵀ · X[T,K] for one chunk of exactly T tokens. With
// accumulate_into_output the chunk's product is added to dw_chunk's contents in the epilogue
// (D = acc + D, one fp32 add per element), so chunks can be summed in sequence without a
// separate kernel.
void lt_gemm_dw_chunk(const LtConfig& config, GemmDType dtype, const void* dy, const void* x,
                      float* dw_chunk, int64_t T, int64_t N, int64_t K, bool accumulate_into_output,
                      void* workspace, std::size_t workspace_bytes, CUstream_st* stream);

}  // namespace bitcheck::cuda
