// The configuration search's cuBLASLt primitives (cublaslt_search.h): the enumeration for
// `bitcheck algos` and `--refine` (the heuristic's list, split-K variants of it, then every tile
// and stages pair of every algorithm id, each checked with cublasLtMatmulAlgoCheck for the shape)
// and the variants of one configuration from its algorithm's capabilities.
#include <algorithm>
#include <vector>

#include "common/cuda_check.cuh"
#include "matmul/cublaslt_internal.cuh"
#include "matmul/cublaslt_search.h"

namespace bitcheck::cuda {

namespace {

template <typename T>
std::vector<T> capability_list(const cublasLtMatmulAlgo_t& algo,
                               cublasLtMatmulAlgoCapAttributes_t attribute, T when_empty) {
  std::size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0) {
    return {when_empty};
  }
  std::vector<T> values(bytes / sizeof(T));
  BITCHECK_CUDA_CALL(
      cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, values.data(), bytes, &bytes));
  return values;
}

// Collects distinct accepted configurations up to a count, checking each candidate once.
class ConfigCollector {
 public:
  ConfigCollector(const ProblemKey& key, std::size_t max_count)
      : key_(key), max_count_(max_count) {}
  bool full() const { return configs_.size() >= max_count_ || attempts_ >= kMaxAttempts; }
  void offer(LtConfig config) {
    if (full()) return;
    for (const LtConfig& seen : configs_) {
      if (seen.same_kernel(config)) return;
    }
    ++attempts_;
    std::size_t workspace = 0;
    if (!lt_config_supports(config, key_.form, key_.dtype, key_.M, key_.N, key_.K, &workspace)) {
      return;
    }
    if (workspace > kHeuristicWorkspaceBytes) return;
    config.workspace_bytes = workspace;
    configs_.push_back(config);
  }
  std::vector<LtConfig> take() { return std::move(configs_); }

 private:
  // AlgoCheck is host-only and fast, but tiles x stages x algorithms can reach the tens of
  // thousands; this bounds one enumeration to about a second.
  static constexpr std::size_t kMaxAttempts = 20000;
  ProblemKey key_;
  std::size_t max_count_;
  std::size_t attempts_ = 0;
  std::vector<LtConfig> configs_;
};

// Split-K counts and reduction schemes the algorithm supports, around a heuristic result.
void offer_split_k_variants(ConfigCollector& collector, const ProblemKey& key,
                            const LtConfig& base) {
  cublasLtMatmulAlgo_t algo{};
  if (!init_algo(base, key.form, key.dtype, algo)) return;
  collector.offer(lt_with_split_k(base, 1));
  if (capability<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return;
  const uint32_t schemes = capability<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  for (const int32_t splits : {2, 3, 4, 6, 8, 16}) {
    for (const uint32_t scheme :
         {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
          CUBLASLT_REDUCTION_SCHEME_INPLACE}) {
      if ((schemes & scheme) == 0) continue;
      LtConfig variant = base;
      variant.splitk_num = splits;
      variant.reduction_scheme = scheme;
      collector.offer(variant);
    }
  }
}

// Every tile and stages pair of every algorithm id, split-K 1, default swizzle and options.
void offer_algorithm_ids(ConfigCollector& collector, const ProblemKey& key) {
  const cudaDataType_t in = input_type(key.dtype);
  const cudaDataType_t out = output_type(key.form, key.dtype);
  std::vector<int> ids(512);
  int id_count = 0;
  BITCHECK_CUDA_CALL(cublasLtMatmulAlgoGetIds(lt_handle(), kComputeType, kScaleType, in, in, out,
                                              out, static_cast<int>(ids.size()), ids.data(),
                                              &id_count));
  ids.resize(static_cast<std::size_t>(id_count));
  for (const int id : ids) {
    cublasLtMatmulAlgo_t algo{};
    if (cublasLtMatmulAlgoInit(lt_handle(), kComputeType, kScaleType, in, in, out, out, id,
                               &algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    const auto tiles =
        capability_list<uint32_t>(algo, CUBLASLT_ALGO_CAP_TILE_IDS, CUBLASLT_MATMUL_TILE_UNDEFINED);
    const auto stages = capability_list<uint32_t>(algo, CUBLASLT_ALGO_CAP_STAGES_IDS,
                                                  CUBLASLT_MATMUL_STAGES_UNDEFINED);
    for (const uint32_t tile : tiles) {
      for (const uint32_t stage : stages) {
        if (collector.full()) return;
        LtConfig config;
        config.algo_id = id;
        config.tile_id = tile;
        config.stages_id = stage;
        collector.offer(config);
      }
    }
  }
}

}  // namespace

std::vector<LtConfig> lt_enumerate_configs(GemmDType dtype, int64_t M, int64_t N, int64_t K,
                                           int max_count, LtGemmForm form) {
  const ProblemKey key{form, dtype, M, N, K};
  require_shape(key);
  if (max_count <= 0) return {};
  ConfigCollector collector(key, static_cast<std::size_t>(max_count));
  std::vector<LtConfig> heuristic;
  for (const auto& result : heuristic_results(key, std::max(max_count, kPinnedCandidateCount))) {
    heuristic.push_back(config_from_algo(result.algo, result.workspaceSize));
    collector.offer(heuristic.back());
  }
  for (const LtConfig& base : heuristic) offer_split_k_variants(collector, key, base);
  offer_algorithm_ids(collector, key);
  return collector.take();
}

LtConfig lt_with_split_k(LtConfig base, std::int32_t splits) {
  base.splitk_num = splits;
  base.reduction_scheme =
      splits == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  return base;
}

bool lt_reduction_allowed(const LtConfig& config, GemmDType dtype, LtGemmForm form) {
  if (config.splitk_num == 1) return true;
  if (output_type(form, dtype) == CUDA_R_32F) return true;
  return config.reduction_scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

std::vector<LtConfig> lt_option_variants(const LtConfig& base, GemmDType dtype, LtGemmForm form) {
  const cudaDataType_t in = input_type(dtype);
  const cudaDataType_t out = output_type(form, dtype);
  cublasLtMatmulAlgo_t algo{};
  if (cublasLtMatmulAlgoInit(lt_handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, out, out,
                             base.algo_id, &algo) != CUBLAS_STATUS_SUCCESS) {
    return {};
  }
  std::vector<LtConfig> variants;
  const auto custom_max = capability<std::int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
  for (std::int32_t option = 0; option <= custom_max; ++option) {
    LtConfig variant = base;
    variant.custom_option = static_cast<std::uint32_t>(option);
    if (!variant.same_kernel(base)) variants.push_back(variant);
  }
  if (capability<std::uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0) {
    LtConfig variant = base;
    variant.cta_swizzling = base.cta_swizzling == 0 ? 1 : 0;
    variants.push_back(variant);
  }
  for (const cublasLtClusterShape_t cluster :
       {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
        CUBLASLT_CLUSTER_SHAPE_1x2x1}) {
    LtConfig variant = base;
    variant.cluster_shape_id = static_cast<std::uint16_t>(cluster);
    if (!variant.same_kernel(base)) variants.push_back(variant);
  }
  return variants;
}

}  // namespace bitcheck::cuda
