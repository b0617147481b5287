// cuBLASLt GEMMs behind cublaslt_gemm.h: the process-wide handle, cached descriptors per shape,
// LtConfig <-> cublasLtMatmulAlgo_t, heuristic and pinned derivation. The enumeration of
// configurations for the tuner's search is in cublaslt_search.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_check.cuh"
#include "cublaslt_gemm.h"
#include "cublaslt_internal.cuh"

namespace bitcheck::cuda {

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t created = nullptr;
    BITCHECK_CUDA_CALL(cublasLtCreate(&created));
    return created;
  }();
  return handle;
}

namespace {

// Names of cuBLASLt enum values, indexed by value, taken from the enum names in cublasLt.h
// (13.1); "-" marks values the header leaves unused. cuBLASLt has no name function of its own.
constexpr const char* kTileNames =
    "undefined 8x8 8x16 16x8 8x32 16x16 32x8 8x64 16x32 32x16 64x8 32x32 32x64 64x32 32x128 "
    "64x64 128x32 64x128 128x64 64x256 128x128 256x64 64x512 128x256 256x128 512x64 64x96 "
    "96x64 96x128 128x160 160x128 192x128 128x192 128x96 32x256 256x32 8x128 8x192 8x256 "
    "8x320 8x384 8x448 8x512 8x576 8x640 8x704 8x768 16x64 16x128 16x192 16x256 16x320 16x384 "
    "16x448 16x512 16x576 16x640 16x704 16x768 24x64 24x128 24x192 24x256 24x320 24x384 "
    "24x448 24x512 24x576 24x640 24x704 24x768 32x192 32x320 32x384 32x448 32x512 32x576 "
    "32x640 32x704 32x768 40x64 40x128 40x192 40x256 40x320 40x384 40x448 40x512 40x576 "
    "40x640 40x704 40x768 48x64 48x128 48x192 48x256 48x320 48x384 48x448 48x512 48x576 "
    "48x640 48x704 48x768 56x64 56x128 56x192 56x256 56x320 56x384 56x448 56x512 56x576 "
    "56x640 56x704 56x768 64x192 64x320 64x384 64x448 64x576 64x640 64x704 64x768 72x64 "
    "72x128 72x192 72x256 72x320 72x384 72x448 72x512 72x576 72x640 80x64 80x128 80x192 "
    "80x256 80x320 80x384 80x448 80x512 80x576 88x64 88x128 88x192 88x256 88x320 88x384 "
    "88x448 88x512 96x192 96x256 96x320 96x384 96x448 96x512 104x64 104x128 104x192 104x256 "
    "104x320 104x384 104x448 112x64 112x128 112x192 112x256 112x320 112x384 120x64 120x128 "
    "120x192 120x256 120x320 120x384 128x320 128x384 136x64 136x128 136x192 136x256 136x320 "
    "144x64 144x128 144x192 144x256 144x320 152x64 152x128 152x192 152x256 152x320 160x64 "
    "160x192 160x256 168x64 168x128 168x192 168x256 176x64 176x128 176x192 176x256 184x64 "
    "184x128 184x192 184x256 192x64 192x192 192x256 200x64 200x128 200x192 208x64 208x128 "
    "208x192 216x64 216x128 216x192 224x64 224x128 224x192 232x64 232x128 232x192 240x64 "
    "240x128 240x192 248x64 248x128 248x192 256x192 264x64 264x128 272x64 272x128 280x64 "
    "280x128 288x64 288x128 296x64 296x128 304x64 304x128 312x64 312x128 320x64 320x128 "
    "328x64 328x128 336x64 336x128 344x64 344x128 352x64 352x128 360x64 360x128 368x64 "
    "368x128 376x64 376x128 384x64 384x128 392x64 400x64 408x64 416x64 424x64 432x64 440x64 "
    "448x64 456x64 464x64 472x64 480x64 488x64 496x64 504x64 520x64 528x64 536x64 544x64 "
    "552x64 560x64 568x64 576x64 584x64 592x64 600x64 608x64 616x64 624x64 632x64 640x64 "
    "648x64 656x64 664x64 672x64 680x64 688x64 696x64 704x64 712x64 720x64 728x64 736x64 "
    "744x64 752x64 760x64 768x64 64x16 64x24 64x40 64x48 64x56 64x72 64x80 64x88 64x104 "
    "64x112 64x120 64x136 64x144 64x152 64x160 64x168 64x176 64x184 64x200 64x208 64x216 "
    "64x224 64x232 64x240 64x248 64x264 64x272 64x280 64x288 64x296 64x304 64x312 64x328 "
    "64x336 64x344 64x352 64x360 64x368 64x376 64x392 64x400 64x408 64x416 64x424 64x432 "
    "64x440 64x456 64x464 64x472 64x480 64x488 64x496 64x504 64x520 64x528 64x536 64x544 "
    "64x552 64x560 64x568 64x584 64x592 64x600 64x608 64x616 64x624 64x632 64x648 64x656 "
    "64x664 64x672 64x680 64x688 64x696 64x712 64x720 64x728 64x736 64x744 64x752 64x760 "
    "128x8 128x16 128x24 128x40 128x48 128x56 128x72 128x80 128x88 128x104 128x112 128x120 "
    "128x136 128x144 128x152 128x168 128x176 128x184 128x200 128x208 128x216 128x224 128x232 "
    "128x240 128x248 128x264 128x272 128x280 128x288 128x296 128x304 128x312 128x328 128x336 "
    "128x344 128x352 128x360 128x368 128x376 128x392 128x400 128x408 128x416 128x424 128x432 "
    "128x440 128x448 128x456 128x464 128x472 128x480 128x488 128x496 128x504 128x512 192x8 "
    "192x16 192x24 192x32 192x40 192x48 192x56 192x72 192x80 192x88 192x96 192x104 192x112 "
    "192x120 192x136 192x144 192x152 192x160 192x168 192x176 192x184 192x200 192x208 192x216 "
    "192x224 192x232 192x240 192x248 192x264 192x272 192x280 192x288 192x296 192x304 192x312 "
    "192x320 192x328 192x336 256x8 256x16 256x24 256x40 256x48 256x56 256x72 256x80 256x88 "
    "256x96 256x104 256x112 256x120 256x136 256x144 256x152 256x160 256x168 256x176 256x184 "
    "256x200 256x208 256x216 256x224 256x232 256x240 256x248 256x256 320x8 320x16 320x24 "
    "320x32 320x40 320x48 320x56 320x72 320x80 320x88 320x96 320x104 320x112 320x120 320x136 "
    "320x144 320x152 320x160 320x168 320x176 320x184 320x192 320x200 384x8 384x16 384x24 "
    "384x32 384x40 384x48 384x56 384x72 384x80 384x88 384x96 384x104 384x112 384x120 384x136 "
    "384x144 384x152 384x160 384x168 448x8 448x16 448x24 448x32 448x40 448x48 448x56 448x72 "
    "448x80 448x88 448x96 448x104 448x112 448x120 448x128 448x136 448x144 512x8 512x16 512x24 "
    "512x32 512x40 512x48 512x56 512x72 512x80 512x88 512x96 512x104 512x112 512x120 512x128 "
    "576x8 576x16 576x24 576x32 576x40 576x48 576x56 576x72 576x80 576x88 576x96 576x104 "
    "576x112 640x8 640x16 640x24 640x32 640x40 640x48 640x56 640x72 640x80 640x88 640x96 "
    "704x8 704x16 704x24 704x32 704x40 704x48 704x56 704x72 704x80 704x88 768x8 768x16 768x24 "
    "768x32 768x40 768x48 768x56 768x72 768x80 256x512 256x1024 512x512 512x1024";
constexpr const char* kStagesNames =
    "undefined 16x1 16x2 16x3 16x4 16x5 16x6 32x1 32x2 32x3 32x4 32x5 32x6 64x1 64x2 64x3 "
    "64x4 64x5 64x6 128x1 128x2 128x3 128x4 128x5 128x6 32x10 8x4 16x10 8x5 - - 8x3 8xauto "
    "16xauto 32xauto 64xauto 128xauto 256xauto 768xauto";
constexpr const char* kClusterShapeNames =
    "auto - 1x1x1 2x1x1 4x1x1 1x2x1 2x2x1 4x2x1 1x4x1 2x4x1 4x4x1 8x1x1 1x8x1 8x2x1 2x8x1 "
    "16x1x1 1x16x1 3x1x1 5x1x1 6x1x1 7x1x1 9x1x1 10x1x1 11x1x1 12x1x1 13x1x1 14x1x1 15x1x1 "
    "3x2x1 5x2x1 6x2x1 7x2x1 1x3x1 2x3x1 3x3x1 4x3x1 5x3x1 3x4x1 1x5x1 2x5x1 3x5x1 1x6x1 "
    "2x6x1 1x7x1 2x7x1 1x9x1 1x10x1 1x11x1 1x12x1 1x13x1 1x14x1 1x15x1";
constexpr const char* kInnerShapeNames = "undefined mma884 mma1684 mma1688 mma16816";

// The index-th space-separated word of `names`, or the number itself for values past the list
// (a newer cuBLASLt at runtime may know more).
std::string enum_name(const char* names, int64_t index) {
  const char* word = names;
  for (int64_t i = 0; i < index && word != nullptr; ++i) {
    word = std::strchr(word, ' ');
    if (word != nullptr) ++word;
  }
  if (index < 0 || word == nullptr) return std::to_string(index);
  const char* end = std::strchr(word, ' ');
  std::string name = end == nullptr ? std::string(word) : std::string(word, end);
  return name == "-" ? std::to_string(index) : name;
}

std::string reduction_scheme_name(uint32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE:
      return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE:
      return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE:
      return "compute_type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE:
      return "output_type";
    default:
      return std::to_string(scheme);
  }
}

}  // namespace

// ---- LtConfig -------------------------------------------------------------------------------

std::string LtConfig::describe() const {
  return "algo=" + std::to_string(algo_id) + " tile=" + enum_name(kTileNames, tile_id) +
         " stages=" + enum_name(kStagesNames, stages_id) + " splitk=" + std::to_string(splitk_num) +
         " reduction=" + reduction_scheme_name(reduction_scheme) +
         " swizzle=" + std::to_string(cta_swizzling) + " custom=" + std::to_string(custom_option) +
         " cluster=" + enum_name(kClusterShapeNames, cluster_shape_id) +
         " inner=" + enum_name(kInnerShapeNames, inner_shape_id) +
         " workspace=" + std::to_string(workspace_bytes);
}

std::vector<std::pair<std::string, int64_t>> LtConfig::fields() const {
  return {{"algo_id", algo_id},
          {"tile_id", tile_id},
          {"stages_id", stages_id},
          {"splitk_num", splitk_num},
          {"reduction_scheme", reduction_scheme},
          {"cta_swizzling", cta_swizzling},
          {"custom_option", custom_option},
          {"cluster_shape_id", cluster_shape_id},
          {"inner_shape_id", inner_shape_id},
          {"workspace_bytes", static_cast<int64_t>(workspace_bytes)}};
}

namespace {

// One named field of a recorded configuration, range-checked against the cuBLASLt type that
// stores it so a corrupted file cannot be truncated silently into another kernel.
class FieldReader {
 public:
  explicit FieldReader(const std::vector<std::pair<std::string, int64_t>>& fields)
      : fields_(fields) {
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (fields_[i].first == fields_[j].first) fail(fields_[i].first, "appears twice");
      }
    }
  }
  int64_t get(const std::string& name, int64_t min_value, int64_t max_value) {
    for (const auto& [field_name, value] : fields_) {
      if (field_name != name) continue;
      ++used_;
      if (value < min_value || value > max_value) {
        fail(name, "is " + std::to_string(value) + ", outside [" + std::to_string(min_value) +
                       ", " + std::to_string(max_value) + "]");
      }
      return value;
    }
    fail(name, "is missing");
  }
  void require_all_used() const {
    if (used_ == fields_.size()) return;
    const auto known = LtConfig{}.fields();
    for (const auto& field : fields_) {
      const std::string& name = field.first;
      const bool is_known =
          std::any_of(known.begin(), known.end(), [&](const auto& f) { return f.first == name; });
      if (!is_known) fail(name, "is not an LtConfig field");
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& name, const std::string& what) {
    throw std::invalid_argument("LtConfig field '" + name + "' " + what);
  }
  const std::vector<std::pair<std::string, int64_t>>& fields_;
  std::size_t used_ = 0;
};

constexpr int64_t kInt32Max = 0x7fffffff;
constexpr int64_t kUint32Max = 0xffffffffLL;
constexpr int64_t kUint16Max = 0xffff;

}  // namespace

LtConfig LtConfig::from_fields(const std::vector<std::pair<std::string, int64_t>>& fields) {
  FieldReader reader(fields);
  LtConfig config;
  config.algo_id = static_cast<int32_t>(reader.get("algo_id", 0, kInt32Max));
  config.tile_id = static_cast<uint32_t>(reader.get("tile_id", 0, kUint32Max));
  config.stages_id = static_cast<uint32_t>(reader.get("stages_id", 0, kUint32Max));
  config.splitk_num = static_cast<int32_t>(reader.get("splitk_num", 1, kInt32Max));
  config.reduction_scheme =
      static_cast<uint32_t>(reader.get("reduction_scheme", 0, CUBLASLT_REDUCTION_SCHEME_MASK));
  config.cta_swizzling = static_cast<uint32_t>(reader.get("cta_swizzling", 0, kUint32Max));
  config.custom_option = static_cast<uint32_t>(reader.get("custom_option", 0, kUint32Max));
  config.cluster_shape_id = static_cast<uint16_t>(reader.get("cluster_shape_id", 0, kUint16Max));
  config.inner_shape_id = static_cast<uint16_t>(reader.get("inner_shape_id", 0, kUint16Max));
  config.workspace_bytes = static_cast<uint64_t>(reader.get("workspace_bytes", 0, INT64_MAX));
  reader.require_all_used();
  return config;
}

bool LtConfig::same_kernel(const LtConfig& other) const {
  return std::tie(algo_id, tile_id, stages_id, splitk_num, reduction_scheme, cta_swizzling,
                  custom_option, cluster_shape_id, inner_shape_id) ==
         std::tie(other.algo_id, other.tile_id, other.stages_id, other.splitk_num,
                  other.reduction_scheme, other.cta_swizzling, other.custom_option,
                  other.cluster_shape_id, other.inner_shape_id);
}

const char* to_string(LtGemmForm form) {
  switch (form) {
    case LtGemmForm::forward:
      return "forward";
    case LtGemmForm::input_grad:
      return "input_grad";
    case LtGemmForm::weight_grad:
      return "weight_grad";
  }
  return "unknown";
}

// ---- cuBLASLt plumbing ----------------------------------------------------------------------

namespace {

// Pinned configurations are chosen where a training or prefill step spends its time.
constexpr int64_t kPinnedTuneRows = 8192;

}  // namespace

cudaDataType_t input_type(GemmDType dtype) {
  switch (dtype) {
    case GemmDType::bf16:
      return CUDA_R_16BF;
    case GemmDType::fp16:
      return CUDA_R_16F;
    case GemmDType::fp32:
      return CUDA_R_32F;
  }
  throw std::invalid_argument("unknown GemmDType");
}

cudaDataType_t output_type(LtGemmForm form, GemmDType dtype) {
  return form == LtGemmForm::weight_grad ? CUDA_R_32F : input_type(dtype);
}

namespace {

const char* dtype_name(GemmDType dtype) {
  switch (dtype) {
    case GemmDType::bf16:
      return "bf16";
    case GemmDType::fp16:
      return "fp16";
    case GemmDType::fp32:
      return "fp32";
  }
  return "unknown";
}

std::string shape_text(const ProblemKey& key) {
  return std::string(to_string(key.form)) + " " + dtype_name(key.dtype) +
         " M=" + std::to_string(key.M) + " N=" + std::to_string(key.N) +
         " K=" + std::to_string(key.K);
}

// Descriptors of one (form, dtype, shape) in cuBLASLt's column-major terms. A row-major [R,C]
// matrix is a column-major [C,R] one with leading dimension C, so each form becomes:
//   forward      Yᵀ[N,M]  = (W as col-major [K,N])ᵀ · (X as [K,M])        A=W (T), B=X (N)
//   input_grad   dXᵀ[K,M] = (W as col-major [K,N])  · (dY as [N,M])       A=W (N), B=dY (N)
//   weight_grad  dWᵀ[K,N] = (X as col-major [K,T])  · (dY as [N,T])ᵀ      A=X (N), B=dY (T)
// The token count M is always cuBLASLt's n or k, never the leading dimension of anything, so a
// row's data sits at the same offsets whatever M is.
struct Problem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  BITCHECK_CUDA_CALL(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), rows));
  return layout;
}

Problem make_problem(const ProblemKey& key) {
  const cudaDataType_t in = input_type(key.dtype);
  const cudaDataType_t out = output_type(key.form, key.dtype);
  Problem p;
  BITCHECK_CUDA_CALL(cublasLtMatmulDescCreate(&p.desc, kComputeType, kScaleType));
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  switch (key.form) {
    case LtGemmForm::forward:
      trans_a = CUBLAS_OP_T;
      p.a = make_layout(in, key.K, key.N);
      p.b = make_layout(in, key.K, key.M);
      p.d = make_layout(out, key.N, key.M);
      break;
    case LtGemmForm::input_grad:
      p.a = make_layout(in, key.K, key.N);
      p.b = make_layout(in, key.N, key.M);
      p.d = make_layout(out, key.K, key.M);
      break;
    case LtGemmForm::weight_grad:
      trans_b = CUBLAS_OP_T;
      p.a = make_layout(in, key.K, key.M);
      p.b = make_layout(in, key.N, key.M);
      p.d = make_layout(out, key.K, key.N);
      break;
  }
  BITCHECK_CUDA_CALL(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                    sizeof(trans_a)));
  BITCHECK_CUDA_CALL(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                    sizeof(trans_b)));
  return p;
}

}  // namespace

void require_shape(const ProblemKey& key) {
  if (key.M < 1 || key.N < 1 || key.K < 1) {
    throw std::invalid_argument("cuBLASLt GEMM needs positive dimensions, got " + shape_text(key));
  }
}

namespace {

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Descriptors are created once per shape and kept for the process: a sweep revisits the same
// shapes many times and creating them costs more than the small GEMMs it times.
const Problem& cached_problem(const ProblemKey& key) {
  require_shape(key);
  static std::map<ProblemKey, Problem> problems;
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto found = problems.find(key);
  if (found == problems.end()) found = problems.emplace(key, make_problem(key)).first;
  return found->second;
}

template <typename T>
T get_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  std::size_t written = 0;
  BITCHECK_CUDA_CALL(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written));
  return value;
}

template <typename T>
void set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute,
                T value) {
  BITCHECK_CUDA_CALL(cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)));
}

}  // namespace

LtConfig config_from_algo(const cublasLtMatmulAlgo_t& algo, std::size_t workspace_bytes) {
  LtConfig c;
  c.algo_id = get_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  c.tile_id = get_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages_id = get_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk_num = get_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  c.reduction_scheme = get_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  c.cta_swizzling = get_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  c.custom_option = get_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  c.cluster_shape_id = get_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  c.inner_shape_id = get_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  c.workspace_bytes = workspace_bytes;
  return c;
}

// Returns false when this cuBLASLt does not know the algorithm id for these types.
bool init_algo(const LtConfig& c, LtGemmForm form, GemmDType dtype, cublasLtMatmulAlgo_t& algo) {
  const cudaDataType_t in = input_type(dtype);
  const cudaDataType_t out = output_type(form, dtype);
  if (cublasLtMatmulAlgoInit(lt_handle(), kComputeType, kScaleType, in, in, out, out, c.algo_id,
                             &algo) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  set_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile_id);
  set_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages_id);
  set_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.splitk_num);
  set_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction_scheme);
  set_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.cta_swizzling);
  set_config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom_option);
  set_config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape_id);
  set_config(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape_id);
  return true;
}

namespace {

// The contract keeps fp32 GEMMs in fp32: refuse any kernel whose inputs are rounded to TF32 or
// to 16-bit types (emulation), even if cuBLASLt would offer one.
bool numerics_allowed(const cublasLtMatmulAlgo_t& algo, GemmDType dtype) {
  if (dtype != GemmDType::fp32) return true;
  uint64_t flags = 0;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &flags,
                                        sizeof(flags), &written) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  const uint64_t narrowed = CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32 |
                            CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF |
                            CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F;
  return (flags & narrowed) == 0;
}

cublasStatus_t check_algo(const Problem& p, const cublasLtMatmulAlgo_t& algo,
                          std::size_t* workspace_bytes) {
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t status =
      cublasLtMatmulAlgoCheck(lt_handle(), p.desc, p.a, p.b, p.d, p.d, &algo, &result);
  if (status == CUBLAS_STATUS_SUCCESS && workspace_bytes != nullptr) {
    *workspace_bytes = result.workspaceSize;
  }
  return status;
}

// A configuration checked for one shape, ready to run.
struct CheckedAlgo {
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
};

CheckedAlgo check_config(const LtConfig& config, const ProblemKey& key) {
  const Problem& p = cached_problem(key);
  CheckedAlgo checked;
  if (!init_algo(config, key.form, key.dtype, checked.algo)) return checked;
  if (!numerics_allowed(checked.algo, key.dtype)) return checked;
  checked.status = check_algo(p, checked.algo, &checked.workspace_bytes);
  return checked;
}

// Running a config costs one map lookup after the first call per (config, shape); AlgoCheck on
// every call would add microseconds to GEMMs that take a few.
const CheckedAlgo& cached_check(const LtConfig& config, const ProblemKey& key) {
  using Key = std::tuple<ProblemKey, int32_t, uint32_t, uint32_t, int32_t, uint32_t, uint32_t,
                         uint32_t, uint16_t, uint16_t>;
  static std::map<Key, CheckedAlgo> checked;
  const Key cache_key{key,
                      config.algo_id,
                      config.tile_id,
                      config.stages_id,
                      config.splitk_num,
                      config.reduction_scheme,
                      config.cta_swizzling,
                      config.custom_option,
                      config.cluster_shape_id,
                      config.inner_shape_id};
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto found = checked.find(cache_key);
    if (found != checked.end()) return found->second;
  }
  CheckedAlgo result = check_config(config, key);
  std::lock_guard<std::mutex> lock(cache_mutex());
  return checked.emplace(cache_key, result).first->second;
}

}  // namespace

std::vector<cublasLtMatmulHeuristicResult_t> heuristic_results(const ProblemKey& key, int count) {
  const Problem& p = cached_problem(key);
  cublasLtMatmulPreference_t preference = nullptr;
  BITCHECK_CUDA_CALL(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t max_workspace = kHeuristicWorkspaceBytes;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int returned = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.desc, p.a, p.b, p.d, p.d, preference,
                                            count, results.data(), &returned);
  }
  BITCHECK_CUDA_CALL_NOEXCEPT(cublasLtMatmulPreferenceDestroy(preference));
  BITCHECK_CUDA_CALL(status);
  results.resize(static_cast<std::size_t>(returned));
  results.erase(std::remove_if(results.begin(), results.end(),
                               [&](const cublasLtMatmulHeuristicResult_t& r) {
                                 return r.state != CUBLAS_STATUS_SUCCESS ||
                                        !numerics_allowed(r.algo, key.dtype);
                               }),
                results.end());
  return results;
}

namespace {

[[noreturn]] void throw_no_config(const std::string& what, const ProblemKey& key) {
  throw CudaError("cuBLASLt: " + what + " for " + shape_text(key), "CUBLAS_STATUS_NOT_SUPPORTED",
                  false);
}

LtConfig heuristic_config(const ProblemKey& key) {
  const auto results = heuristic_results(key, 1);
  if (results.empty()) throw_no_config("the heuristic returned no algorithm", key);
  return config_from_algo(results.front().algo, results.front().workspaceSize);
}

}  // namespace

// ---- heuristic and pinned configurations ------------------------------------------------------

LtConfig lt_heuristic_config(GemmDType dtype, int64_t M, int64_t N, int64_t K) {
  return heuristic_config({LtGemmForm::forward, dtype, M, N, K});
}

LtConfig lt_heuristic_config_nn(GemmDType dtype, int64_t M, int64_t N, int64_t K) {
  return heuristic_config({LtGemmForm::input_grad, dtype, M, N, K});
}

LtConfig lt_heuristic_config_dw(GemmDType dtype, int64_t N, int64_t K, int64_t T) {
  return heuristic_config({LtGemmForm::weight_grad, dtype, T, N, K});
}

const std::vector<int64_t>& lt_pinned_checked_rows() {
  // Powers of two and their neighbours (where tile and wave counts change), odd sizes, the
  // decode sizes and the training sizes.
  static const std::vector<int64_t> rows = {1,    2,    3,    4,    7,    8,    15,   16,    17,
                                            31,   32,   33,   63,   64,   65,   100,  127,   128,
                                            129,  255,  256,  257,  511,  512,  513,  1000,  1023,
                                            1024, 1025, 2047, 2048, 4095, 4096, 8192, 16383, 16384};
  return rows;
}

namespace {

// The split-K-1 version of a heuristic result: the same kernel with the K sum in one sequence.
LtConfig without_split_k(LtConfig config) {
  config.splitk_num = 1;
  config.reduction_scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  return config;
}

// Workspace the config needs at every row count, or false when any row count is rejected.
bool valid_for_rows(const LtConfig& config, ProblemKey key, const std::vector<int64_t>& rows,
                    std::size_t& max_workspace) {
  max_workspace = 0;
  for (const int64_t m : rows) {
    key.M = m;
    std::size_t workspace = 0;
    if (!lt_config_supports(config, key.form, key.dtype, key.M, key.N, key.K, &workspace)) {
      return false;
    }
    max_workspace = std::max(max_workspace, workspace);
  }
  return max_workspace <= kHeuristicWorkspaceBytes;
}

// ---- accuracy gate for derived configurations ------------------------------------------------
// cuBLASLt accepting a configuration (cublasLtMatmulAlgoCheck) says it runs, not that its result
// is right, and a heuristic candidate with split-K forced to 1 is a configuration the library
// never proposed for the shape. A derived configuration must therefore agree with the library
// default on random data before it is pinned.

__global__ void fill_uniform_kernel(void* data, int64_t count, GemmDType dtype, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float value = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (dtype == GemmDType::bf16) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(value);
    } else if (dtype == GemmDType::fp16) {
      static_cast<__half*>(data)[i] = __float2half(value);
    } else {
      static_cast<float*>(data)[i] = value;
    }
  }
}

std::size_t element_bytes(GemmDType dtype) {
  return dtype == GemmDType::fp32 ? 4 : 2;
}

std::vector<float> to_host_floats(const void* device, int64_t count, GemmDType dtype) {
  std::vector<float> values(static_cast<std::size_t>(count));
  if (dtype == GemmDType::fp32) {
    BITCHECK_CUDA_CALL(
        cudaMemcpy(values.data(), device, values.size() * 4, cudaMemcpyDeviceToHost));
    return values;
  }
  std::vector<uint16_t> raw(static_cast<std::size_t>(count));
  BITCHECK_CUDA_CALL(cudaMemcpy(raw.data(), device, raw.size() * 2, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (dtype == GemmDType::bf16) {
      uint32_t bits = static_cast<uint32_t>(raw[i]) << 16;
      std::memcpy(&values[i], &bits, 4);
    } else {
      values[i] = __half2float(__ushort_as_half(raw[i]));
    }
  }
  return values;
}

struct DeviceScratch {
  void* pointer = nullptr;
  explicit DeviceScratch(std::size_t bytes) {
    BITCHECK_CUDA_CALL(cudaMalloc(&pointer, std::max<std::size_t>(bytes, 16)));
  }
  ~DeviceScratch() { cudaFree(pointer); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

// Runs `candidate` and `reference` on the same random operands at M = rows and returns the RMS of
// their difference over the RMS of the reference. Rounding and a different K order give about
// 2^-8 (bf16 output) or less; a kernel that drops or repeats part of the K sum gives O(1).
double relative_rms_difference(const LtConfig& candidate, const LtConfig& reference, ProblemKey key,
                               int64_t rows) {
  const int64_t M = rows, N = key.N, K = key.K;
  // Operand and output extents per form (see the header): A is the row operand, B the weight.
  int64_t a_count = 0, b_count = 0, out_count = 0;
  GemmDType out_dtype = key.dtype;
  switch (key.form) {
    case LtGemmForm::forward:
      a_count = M * K;
      b_count = N * K;
      out_count = M * N;
      break;
    case LtGemmForm::input_grad:
      a_count = M * N;
      b_count = N * K;
      out_count = M * K;
      break;
    case LtGemmForm::weight_grad:
      a_count = M * N;
      b_count = M * K;
      out_count = N * K;
      out_dtype = GemmDType::fp32;
      break;
  }
  const std::size_t workspace_bytes = std::max<std::size_t>(
      std::max<uint64_t>(candidate.workspace_bytes, reference.workspace_bytes), 1);
  DeviceScratch a(a_count * element_bytes(key.dtype)), b(b_count * element_bytes(key.dtype));
  DeviceScratch out_candidate(out_count * element_bytes(out_dtype)),
      out_reference(out_count * element_bytes(out_dtype));
  DeviceScratch workspace(workspace_bytes);
  fill_uniform_kernel<<<264, 256>>>(a.pointer, a_count, key.dtype, 0x5EED0001ull);
  fill_uniform_kernel<<<264, 256>>>(b.pointer, b_count, key.dtype, 0x5EED0002ull);
  BITCHECK_CUDA_CALL(cudaGetLastError());
  auto run = [&](const LtConfig& config, void* out) {
    switch (key.form) {
      case LtGemmForm::forward:
        lt_gemm(config, key.dtype, a.pointer, b.pointer, out, M, N, K, workspace.pointer,
                workspace_bytes, nullptr);
        break;
      case LtGemmForm::input_grad:
        lt_gemm_nn(config, key.dtype, a.pointer, b.pointer, out, M, N, K, workspace.pointer,
                   workspace_bytes, nullptr);
        break;
      case LtGemmForm::weight_grad:
        lt_gemm_dw_chunk(config, key.dtype, a.pointer, b.pointer, static_cast<float*>(out), M, N, K,
                         false, workspace.pointer, workspace_bytes, nullptr);
        break;
    }
  };
  run(candidate, out_candidate.pointer);
  run(reference, out_reference.pointer);
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
  const std::vector<float> got = to_host_floats(out_candidate.pointer, out_count, out_dtype);
  const std::vector<float> want = to_host_floats(out_reference.pointer, out_count, out_dtype);
  double difference = 0, magnitude = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    difference += d * d;
    magnitude += static_cast<double>(want[i]) * want[i];
  }
  if (!std::isfinite(difference)) return INFINITY;
  return magnitude > 0 ? std::sqrt(difference / magnitude) : (difference > 0 ? INFINITY : 0.0);
}

// Far above rounding (bf16 output: ~2^-9 RMS) and far below a broken K sum.
constexpr double kDerivedConfigMaxRelativeRms = 1.0 / 32;

// Takes the heuristic's candidates at `tune_rows` in its order of estimated speed: first the
// ones that are already split-K 1, then the others with split-K forced to 1; returns the first
// that cuBLASLt accepts at every row count in `check_rows` and whose result agrees with the
// heuristic's own top configuration on random data. Only N, K and the fixed lists decide the
// result, never the M of a later call.
LtConfig derive_pinned(ProblemKey key, int64_t tune_rows, const std::vector<int64_t>& check_rows) {
  key.M = tune_rows;
  const auto results = heuristic_results(key, kPinnedCandidateCount);
  std::vector<LtConfig> candidates;
  for (const bool already_unsplit : {true, false}) {
    for (const auto& result : results) {
      const LtConfig config = config_from_algo(result.algo, result.workspaceSize);
      if ((config.splitk_num == 1) == already_unsplit)
        candidates.push_back(without_split_k(config));
    }
  }
  if (results.empty()) throw_no_config("the heuristic returned no algorithm", key);
  // The gate runs at a small M (where a wrong kernel shows as clearly as at a large one) so the
  // operands stay small; weight_grad chunks are always exactly tune_rows tokens.
  ProblemKey gate_key = key;
  gate_key.M = key.form == LtGemmForm::weight_grad ? tune_rows : std::min<int64_t>(tune_rows, 64);
  const LtConfig trusted = heuristic_config(gate_key);  // the library default at the gate's M
  for (LtConfig& candidate : candidates) {
    std::size_t workspace = 0;
    if (!valid_for_rows(candidate, key, check_rows, workspace)) continue;
    candidate.workspace_bytes = workspace;
    if (relative_rms_difference(candidate, trusted, gate_key, gate_key.M) >
        kDerivedConfigMaxRelativeRms)
      continue;
    return candidate;
  }
  throw_no_config(
      "no split-K-1 configuration is valid at every checked M and agrees with the heuristic", key);
}

}  // namespace

LtConfig lt_derive_pinned_config(GemmDType dtype, int64_t N, int64_t K) {
  return derive_pinned({LtGemmForm::forward, dtype, 1, N, K}, kPinnedTuneRows,
                       lt_pinned_checked_rows());
}

LtConfig lt_derive_pinned_config_nn(GemmDType dtype, int64_t N, int64_t K) {
  return derive_pinned({LtGemmForm::input_grad, dtype, 1, N, K}, kPinnedTuneRows,
                       lt_pinned_checked_rows());
}

LtConfig lt_derive_pinned_config_dw(GemmDType dtype, int64_t N, int64_t K, int64_t T) {
  return derive_pinned({LtGemmForm::weight_grad, dtype, T, N, K}, T, {T});
}

bool lt_config_supports(const LtConfig& config, LtGemmForm form, GemmDType dtype, int64_t M,
                        int64_t N, int64_t K, std::size_t* workspace_bytes_needed) {
  const CheckedAlgo& checked = cached_check(config, {form, dtype, M, N, K});
  if (checked.status != CUBLAS_STATUS_SUCCESS) return false;
  if (workspace_bytes_needed != nullptr) *workspace_bytes_needed = checked.workspace_bytes;
  return true;
}

// ---- running --------------------------------------------------------------------------------

namespace {

void run_matmul(const LtConfig& config, const ProblemKey& key, const void* a, const void* b,
                void* d, float beta, void* workspace, std::size_t workspace_bytes,
                CUstream_st* stream) {
  // A default LtConfig names no algorithm (a bucketed pin's unused single config, for instance);
  // cuBLASLt would run some kernel of its own choosing for it, unpinned and unrecorded.
  if (config.algo_id < 0) {
    throw std::invalid_argument("no cuBLASLt algorithm in the configuration (" + config.describe() +
                                ") for " + shape_text(key));
  }
  const CheckedAlgo& checked = cached_check(config, key);
  if (checked.status != CUBLAS_STATUS_SUCCESS) {
    throw CudaError("cuBLASLt rejects " + config.describe() + " for " + shape_text(key) + ": " +
                        cublasLtGetStatusName(checked.status),
                    cublasLtGetStatusName(checked.status), false);
  }
  if (checked.workspace_bytes > workspace_bytes) {
    throw std::invalid_argument(
        config.describe() + " needs " + std::to_string(checked.workspace_bytes) +
        " bytes of workspace for " + shape_text(key) + ", got " + std::to_string(workspace_bytes));
  }
  const Problem& p = cached_problem(key);
  const float alpha = 1.0f;
  BITCHECK_CUDA_CALL(cublasLtMatmul(lt_handle(), p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d,
                                    p.d, &checked.algo, workspace, workspace_bytes, stream));
}

}  // namespace

void lt_gemm(const LtConfig& config, GemmDType dtype, const void* x, const void* w, void* y,
             int64_t M, int64_t N, int64_t K, void* workspace, std::size_t workspace_bytes,
             CUstream_st* stream) {
  run_matmul(config, {LtGemmForm::forward, dtype, M, N, K}, w, x, y, 0.0f, workspace,
             workspace_bytes, stream);
}

void lt_gemm_nn(const LtConfig& config, GemmDType dtype, const void* dy, const void* w, void* dx,
                int64_t M, int64_t N, int64_t K, void* workspace, std::size_t workspace_bytes,
                CUstream_st* stream) {
  run_matmul(config, {LtGemmForm::input_grad, dtype, M, N, K}, w, dy, dx, 0.0f, workspace,
             workspace_bytes, stream);
}

void lt_gemm_dw_chunk(const LtConfig& config, GemmDType dtype, const void* dy, const void* x,
                      float* dw_chunk, int64_t T, int64_t N, int64_t K, bool accumulate_into_output,
                      void* workspace, std::size_t workspace_bytes, CUstream_st* stream) {
  run_matmul(config, {LtGemmForm::weight_grad, dtype, T, N, K}, x, dy, dw_chunk,
             accumulate_into_output ? 1.0f : 0.0f, workspace, workspace_bytes, stream);
}

}  // namespace bitcheck::cuda
