// The GEMM paths of the moe impls (moe_gemms.h): every product goes through matmul's GEMMs, one
// call per expert on that expert's rows. The fixed-order path pins one wgmma tile shape for every
// load (fp32 and GPUs without wgmma take the portable FMA path); the split-K control splits the
// K sum of an expert with few tokens; cuBLASLt runs with the pin table's configuration per
// (dtype, form, N, K) or with its heuristic's per call.
#include <algorithm>
#include <deque>
#include <map>
#include <string>

#include "common/adapter_support.h"
#include "matmul/cublaslt_gemm.h"
#include "matmul/fixed_order_gemm.h"
#include "matmul/pin_lookup.h"
#include "moe/moe_gemms.h"
#include "moe/moe_kernels.h"

namespace bitcheck::moe {
namespace {

using cuda::DeviceBuffer;
using cuda::GemmDType;
using cuda::LtConfig;

// 128 rows of an expert by 256 output columns, X as the wgmma A operand: the largest tile, what
// the prefill loads (hundreds to thousands of tokens per expert) want; a decode's expert of one
// token runs it too, so no expert's GEMM ever changes shape with the load.
const cuda::detail::GemmTile expert_tile{128, 256, false};
constexpr const char* expert_tile_path = "tile.X-as-A.128x256";
constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

const char* byte_offset(const void* base, std::int64_t elements, std::size_t element_bytes) {
  return static_cast<const char*>(base) + elements * static_cast<std::int64_t>(element_bytes);
}

class FixedOrderGemms : public Gemms {
 public:
  void forward(const void* x, const ExpertWeight& w, std::int64_t expert, void* y, std::int64_t m,
               CUstream_st* stream) override {
    gemm(x, w.at(expert), y, m, w.n, w.k, stream);
  }
  // dX = dY · W = dY · (Wᵀ)ᵀ: the forward GEMM over the transposed weight, K' = n.
  void input_grad(const void* dy, const ExpertWeight& w, std::int64_t expert, void* dx,
                  std::int64_t m, CUstream_st* stream) override {
    gemm(dy, w.transposed_at(expert), dx, m, w.k, w.n, stream);
  }
  void weight_grad(const void* dy, const void* x, float* dw, std::int64_t t, std::int64_t n,
                   std::int64_t k, CUstream_st* stream) override {
    cuda::fixed_order_gemm_dw_accumulate(dtype(), dy, x, dw, t, n, k, stream);
  }
  bool needs_transposed() const override { return true; }

 protected:
  GemmDType dtype() const { return cuda_support::device_dtype(dtype_); }

  void gemm(const void* a, const void* b, void* c, std::int64_t m, std::int64_t n, std::int64_t k,
            CUstream_st* stream) {
    if (std::string(cuda::fixed_order_gemm_path(dtype())) == "portable-fma") {
      cuda::fixed_order_gemm(dtype(), a, b, c, m, n, k, stream);
      return;
    }
    cuda::detail::fixed_order_gemm_tile(dtype(), expert_tile, a, b, c, m, n, k, stream);
  }
};

// The control: an expert with fewer than split_k_below_tokens rows gets its K sum as
// split_k_parts partials, each the fixed-order GEMM of a copy of the rows with the other K slices
// zeroed (the zero terms add nothing), rounded to the dtype and added in it.
class SplitKByLoadGemms : public FixedOrderGemms {
 public:
  void forward(const void* x, const ExpertWeight& w, std::int64_t expert, void* y, std::int64_t m,
               CUstream_st* stream) override {
    if (!split(m)) {
      FixedOrderGemms::forward(x, w, expert, y, m, stream);
      return;
    }
    split_gemm(x, w.at(expert), y, m, w.n, w.k, w.element_bytes, stream);
  }
  void input_grad(const void* dy, const ExpertWeight& w, std::int64_t expert, void* dx,
                  std::int64_t m, CUstream_st* stream) override {
    if (!split(m)) {
      FixedOrderGemms::input_grad(dy, w, expert, dx, m, stream);
      return;
    }
    split_gemm(dy, w.transposed_at(expert), dx, m, w.k, w.n, w.element_bytes, stream);
  }
  void release_scratch() override { scratch_.clear(); }

 private:
  static bool split(std::int64_t m) {
    const bool small = m < split_k_below_tokens;
    record_path(small ? "expert.split-k" : "expert.whole");
    return small;
  }

  void split_gemm(const void* a, const void* b, void* c, std::int64_t m, std::int64_t columns,
                  std::int64_t reduced, std::size_t element_bytes, CUstream_st* stream) {
    const std::int64_t part = (reduced + split_k_parts - 1) / split_k_parts;
    DeviceBuffer& partials = scratch_.emplace_back(
        static_cast<std::size_t>(split_k_parts * m * columns) * element_bytes);
    for (int p = 0; p < split_k_parts; ++p) {
      DeviceBuffer& masked =
          scratch_.emplace_back(static_cast<std::size_t>(m * reduced) * element_bytes);
      cuda::moe_mask_columns(dtype(), a, m, reduced, p * part, std::min(reduced, (p + 1) * part),
                             masked.get(), stream);
      gemm(masked.get(), b,
           const_cast<char*>(byte_offset(partials.get(), p * m * columns, element_bytes)), m,
           columns, reduced, stream);
    }
    cuda::moe_sum_partials(dtype(), partials.get(), split_k_parts, m * columns, c, stream);
  }

  std::deque<DeviceBuffer> scratch_;  // alive until the layer's work is done (stable addresses)
};

// cuBLASLt, pinned or by its heuristic per call. The pinned path's weight gradient is the
// token-sequential fixed-order kernel (a GEMM over a chunk of tokens cannot match one token at a
// time, and the alone layout hands the tokens over one by one); the heuristic's is the
// heuristic's GEMM over the expert's tokens at once.
class LtGemms : public FixedOrderGemms {
 public:
  explicit LtGemms(bool pinned) : pinned_(pinned) {}

  void forward(const void* x, const ExpertWeight& w, std::int64_t expert, void* y, std::int64_t m,
               CUstream_st* stream) override {
    const LtConfig config = pinned_ ? pinned_config("forward", w.n, w.k, m)
                                    : heuristic(cuda::lt_heuristic_config(dtype(), m, w.n, w.k),
                                                "forward", w.n, w.k, m);
    cuda::lt_gemm(config, dtype(), x, w.at(expert), y, m, w.n, w.k, workspace(stream),
                  lt_workspace_bytes, stream);
  }
  void input_grad(const void* dy, const ExpertWeight& w, std::int64_t expert, void* dx,
                  std::int64_t m, CUstream_st* stream) override {
    const LtConfig config = pinned_ ? pinned_config("input_grad", w.n, w.k, m)
                                    : heuristic(cuda::lt_heuristic_config_nn(dtype(), m, w.n, w.k),
                                                "input_grad", w.n, w.k, m);
    cuda::lt_gemm_nn(config, dtype(), dy, w.at(expert), dx, m, w.n, w.k, workspace(stream),
                     lt_workspace_bytes, stream);
  }
  void weight_grad(const void* dy, const void* x, float* dw, std::int64_t t, std::int64_t n,
                   std::int64_t k, CUstream_st* stream) override {
    if (pinned_) {
      FixedOrderGemms::weight_grad(dy, x, dw, t, n, k, stream);
      return;
    }
    const LtConfig config =
        heuristic(cuda::lt_heuristic_config_dw(dtype(), n, k, t), "weight_grad", n, k, t);
    cuda::lt_gemm_dw_chunk(config, dtype(), dy, x, dw, t, n, k, true, workspace(stream),
                           lt_workspace_bytes, stream);
  }
  bool needs_transposed() const override { return false; }

 private:
  LtConfig pinned_config(const std::string& form, std::int64_t n, std::int64_t k,
                         std::int64_t rows) {
    const cuda::DeviceInfo& info = device();
    const cuda::PinKey key{info.arch(), info.cublaslt_version, to_string(dtype_), form, n, k, 0};
    const cuda::PinnedConfig found = cuda::lookup_pin(key, rows, [&] {
      return form == "forward" ? cuda::lt_derive_pinned_config(dtype(), n, k)
                               : cuda::lt_derive_pinned_config_nn(dtype(), n, k);
    });
    found.record_path();
    record(form, n, k, found.record());
    return found.config();
  }

  LtConfig heuristic(const LtConfig& config, const std::string& form, std::int64_t n,
                     std::int64_t k, std::int64_t rows) {
    record_path("heuristic");
    nlohmann::json entry = cuda::lt_config_to_json(config);
    entry["source"] = "heuristic at M=" + std::to_string(rows);
    record(form, n, k, entry);
    return config;
  }

  // The last configuration of each GEMM shape, under impl_config.cublaslt["<form> N=.. K=.."].
  void record(const std::string& form, std::int64_t n, std::int64_t k,
              const nlohmann::json& entry) {
    if (!batch_) return;
    if (batch_->impl_config.is_null()) batch_->impl_config = nlohmann::json::object();
    batch_->impl_config["cublaslt"][form + " N=" + std::to_string(n) + " K=" + std::to_string(k)] =
        entry;
  }

  const cuda::DeviceInfo& device() {
    if (!device_.available) device_ = cuda::query_device();
    return device_;
  }

  // One workspace per stream: GEMMs on different streams run at once.
  void* workspace(CUstream_st* stream) {
    DeviceBuffer& buffer = workspaces_[stream];
    if (!buffer.get()) buffer = DeviceBuffer(lt_workspace_bytes);
    return buffer.get();
  }

  bool pinned_;
  cuda::DeviceInfo device_;
  std::map<CUstream_st*, DeviceBuffer> workspaces_;
};

std::vector<PathDecl> fixed_order_paths() {
  std::vector<PathDecl> paths;
  for (const PathDecl& decl : cuda::fixed_order_gemm_paths()) {
    if (decl.name == expert_tile_path) {
      paths.emplace_back(decl.name,
                         "wgmma tile 128x256 for every expert's GEMMs and the router's, whatever "
                         "the load (bf16/fp16 on sm_90)");
    } else if (decl.name == "portable-fma" || decl.name == "dw.token-sequential") {
      paths.emplace_back(decl.name, decl.description);
    }
  }
  return paths;
}

}  // namespace

const void* ExpertWeight::at(std::int64_t expert) const {
  return byte_offset(weights, expert * n * k, element_bytes);
}

const void* ExpertWeight::transposed_at(std::int64_t expert) const {
  return byte_offset(transposed, expert * n * k, element_bytes);
}

std::unique_ptr<Gemms> make_gemms(GemmPath path) {
  switch (path) {
    case GemmPath::fixed_order:
      return std::make_unique<FixedOrderGemms>();
    case GemmPath::split_k_by_load:
      return std::make_unique<SplitKByLoadGemms>();
    case GemmPath::cublaslt_pinned:
      return std::make_unique<LtGemms>(true);
    case GemmPath::cublaslt_heuristic:
      return std::make_unique<LtGemms>(false);
  }
  return nullptr;
}

const char* fixed_order_expert_tile_path() {
  return expert_tile_path;
}

std::string fixed_order_expert_gemm(DType dtype) {
  const char* path = cuda::fixed_order_gemm_path(cuda_support::device_dtype(dtype));
  return std::string(path) == "portable-fma" ? path : expert_tile_path;
}

std::vector<PathDecl> gemm_paths(GemmPath path) {
  switch (path) {
    case GemmPath::fixed_order:
      return fixed_order_paths();
    case GemmPath::split_k_by_load: {
      std::vector<PathDecl> paths = {
          PathDecl("expert.split-k",
                   "an expert with fewer than 4 tokens: its GEMMs' K sums "
                   "split in 4 partials reduced in the dtype"),
          PathDecl("expert.whole", "an expert with 4 tokens or more: the fixed-order GEMM")};
      for (PathDecl decl : fixed_order_paths()) paths.push_back(decl.informative());
      return paths;
    }
    case GemmPath::cublaslt_pinned:
      // The pin table holds no bucketed pin of an expert GEMM's shape yet (`bitcheck algos`
      // makes one): shown where one is, not required.
      return {PathDecl("bucket",
                       "a bucketed pin's configuration for the expert's rows (member: "
                       "rows)")
                  .as_family()
                  .informative(),
              PathDecl("pinned", "an unbucketed pin: one configuration for every load"),
              PathDecl("dw.token-sequential", "dW: one FMA per token in token order")};
    case GemmPath::cublaslt_heuristic:
      return {PathDecl("heuristic", "cuBLASLt's heuristic configuration per expert GEMM")};
  }
  return {};
}

std::vector<SwitchPoint> gemm_switch_points(
    GemmPath path, const CaseSpec& spec,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes, std::int64_t max_rows) {
  if (path == GemmPath::split_k_by_load) {
    if (max_rows < split_k_below_tokens) return {};
    return {{split_k_below_tokens, "expert.split-k", "expert.whole"}};
  }
  if (path != GemmPath::cublaslt_pinned || !cuda::query_device().available) return {};
  const cuda::DeviceInfo device = cuda::query_device();
  std::vector<SwitchPoint> points;
  for (const auto& [n, k] : shapes) {
    const cuda::PinKey key{device.arch(),
                           device.cublaslt_version,
                           to_string(spec.dtype),
                           spec.pass == Pass::forward ? "forward" : "input_grad",
                           n,
                           k,
                           0};
    for (const SwitchPoint& point : cuda::pin_switch_points(key, max_rows)) points.push_back(point);
  }
  std::sort(points.begin(), points.end(),
            [](const SwitchPoint& a, const SwitchPoint& b) { return a.rows < b.rows; });
  return points;
}

}  // namespace bitcheck::moe
