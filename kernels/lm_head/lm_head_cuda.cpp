// CUDA impls of lm_head, and the LM head's GEMMs as ops built on it run them too
// (lm_head_gemms.h). The LM head routes through the invariant GEMMs of kernels/matmul (our
// fixed-order GEMM, or cuBLASLt with a pinned split-K-1 configuration; the cuBLASLt heuristic is
// the library default, the split-K-by-rows GEMM the control). The table is the process-wide device
// copy of the runner's parameter: tied to the embedding's table whenever both ops declare the same
// one.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "common/runtime.h"
#include "common/vocab_device.h"
#include "core/op.h"
#include "lm_head/lm_head.h"
#include "lm_head/lm_head_gemms.h"
#include "matmul/cublaslt_gemm.h"
#include "matmul/fixed_order_gemm.h"
#include "matmul/pin_lookup.h"
#include "matmul/split_k_control.h"

namespace bitcheck {
namespace lm_head {
namespace {

namespace vd = vocab_device;
using cuda::DeviceBuffer;
using cuda::LtConfig;

constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

}  // namespace

// Where an LM head impl's GEMM path changes with M: the fixed-order tile pick (logits: N = V; dh:
// N = H), a pinned table's configuration edges, the split-K control's row threshold.
std::vector<SwitchPoint> gemm_switch_points(GemmPath path, const CaseSpec& spec,
                                            std::int64_t max_rows) {
  if (!cuda::query_device().available) return {};
  const std::int64_t v = spec.dim("V"), hidden = spec.dim("H");
  const cuda::GemmDType dtype = vocab_device::device_dtype(spec.dtype);
  switch (path) {
    case GemmPath::fixed_order: {
      const std::int64_t columns = spec.pass == Pass::forward ? v : hidden;
      return switch_points_of(
          [&](std::int64_t m) { return cuda::fixed_order_gemm_path_for(dtype, m, columns); },
          max_rows);
    }
    case GemmPath::cublaslt_pinned: {
      const cuda::DeviceInfo device = cuda::query_device();
      cuda::PinKey key{device.arch(),
                       device.cublaslt_version,
                       to_string(spec.dtype),
                       spec.pass == Pass::forward ? "forward" : "input_grad",
                       v,
                       hidden,
                       0};
      return cuda::pin_switch_points(key, max_rows);
    }
    case GemmPath::split_k_by_rows:
      return {{cuda::split_k_below_rows, "rows.split-k", "rows.whole"}};
    default:
      return {};
  }
}

namespace {

// The fixed-order GEMM's paths, shown for information where they are matmul's (the same launcher:
// required there), except `kept`.
std::vector<PathDecl> fixed_order_paths_shown(const std::string& kept) {
  std::vector<PathDecl> paths;
  for (PathDecl decl : cuda::fixed_order_gemm_paths())
    paths.push_back(decl.name == kept ? decl : decl.informative());
  return paths;
}

std::vector<PathDecl> joined_paths(std::vector<PathDecl> paths, const std::vector<PathDecl>& more) {
  paths.insert(paths.end(), more.begin(), more.end());
  return paths;
}

}  // namespace

ImplInfo gemm_info(GemmPath path) {
  const std::map<GemmPath, ImplInfo> infos = {
      {GemmPath::fixed_order,
       ImplInfo::invariant(
           "fixed-order", "cuda",
           "matmul's fixed-order GEMM: logits and dh sum H (resp. V) in a fixed block order with "
           "no split-K, dtable one FMA per token in token order")
           // The token-sequential dtable is the LM head's own.
           .with_paths(fixed_order_paths_shown("dw.token-sequential"))},
      {GemmPath::cublaslt_pinned,
       ImplInfo::invariant(
           "cublaslt-pinned", "cuda",
           "cuBLASLt with a pinned split-K-1 configuration per (dtype, V, H) from the pin table "
           "for logits and dh; dtable by the token-sequential fixed-order kernel (a GEMM over a "
           "chunk of tokens cannot match one token at a time, and the alone layout splits the "
           "tokens one by one)")
           .with_paths(
               {PathDecl("bucket", "a bucketed pin's configuration for the M bucket").as_family(),
                PathDecl("pinned", "an unbucketed pin: one configuration for every M"),
                PathDecl("dw.token-sequential", "dtable: one FMA per token in token order")})},
      // Whether the library default drifts is observed (on an H200 with cuBLASLt 13.1 its forward
      // kept split-K 1 at every M and only dh's V-long sum drifted; docs/notes-cublaslt.md).
      {GemmPath::cublaslt_heuristic,
       ImplInfo::library_default(
           "cublaslt-heuristic", "cuda",
           "library default (observed): cuBLASLt heuristic per shape (split-K chosen per M); on "
           "an H200 at vocabulary shapes it kept split-K 1 for logits but split dh's V-long sum "
           "when rows were few")
           .with_paths({PathDecl("heuristic", "cuBLASLt's heuristic configuration per shape")})},
      {GemmPath::split_k_by_rows,
       ImplInfo::control(
           "split-k-by-rows", "cuda",
           "control: with fewer than 4 rows, the fixed-order GEMM's H sum (logits) and V sum "
           "(dh) split into 4 partials reduced in the output dtype, like a library heuristic "
           "choosing split-K for small M; dtable as fixed-order")
           .with_paths(joined_paths(
               {PathDecl("rows.split-k", "fewer than 4 rows: the sums split in 4 partials"),
                PathDecl("rows.whole", "4 rows or more: the fixed-order GEMM's whole sums")},
               fixed_order_paths_shown("")))},
  };
  return infos.at(path);
}

std::optional<std::string> gemm_skip_reason(GemmPath path, const CaseSpec& spec) {
  const bool fixed_order_gemm = path == GemmPath::fixed_order || path == GemmPath::split_k_by_rows;
  if (fixed_order_gemm && (spec.dim("V") % 8 || spec.dim("H") % 8)) {
    return "fixed-order GEMM needs V and H multiples of 8";
  }
  return std::nullopt;
}

namespace {

class LmHeadGemms;
BenchMeasurement benchmark_logits(LmHeadGemms& gemms, const CaseSpec& spec,
                                  const BenchSettings& settings);

// The three products of the LM head on one path. V plays the GEMM's N and H its K.
class LmHeadGemms : public Gemms {
 public:
  explicit LmHeadGemms(GemmPath path) : path_(path) {}
  GemmPath path() const { return path_; }

  // logits[M,V] = h[M,H] · table[V,H]ᵀ
  void logits(Batch& batch, const void* h, const void* table, void* logits,
              std::int64_t m) override {
    const std::int64_t v = batch.spec->dim("V"), hidden = batch.spec->dim("H");
    const cuda::GemmDType dtype = vd::device_dtype(batch.spec->dtype);
    if (path_ == GemmPath::split_k_by_rows) {
      split_k(batch, "forward", h, *vd::shared_parameter(batch, "table"), logits, m, hidden, v);
      return;
    }
    if (path_ == GemmPath::fixed_order) {
      cuda::fixed_order_gemm_forced(dtype, batch.spec->forced_path, h, table, logits, m, v, hidden,
                                    nullptr);
      record(batch, "forward", {{"path", cuda::fixed_order_gemm_path(dtype)}});
      return;
    }
    LtConfig config =
        path_ == GemmPath::cublaslt_pinned
            ? pinned(batch, "forward", m)
            : heuristic(batch, "forward", cuda::lt_heuristic_config(dtype, m, v, hidden), m);
    cuda::lt_gemm(config, dtype, h, table, logits, m, v, hidden, workspace(), lt_workspace_bytes,
                  nullptr);
  }

  // dh[M,H] = dlogits[M,V] · table[V,H]
  void input_grad(Batch& batch, const void* dlogits, void* dh, std::int64_t m) override {
    const std::int64_t v = batch.spec->dim("V"), hidden = batch.spec->dim("H");
    const cuda::GemmDType dtype = vd::device_dtype(batch.spec->dtype);
    if (path_ == GemmPath::split_k_by_rows) {
      auto table_t = vd::shared_parameter(batch, "table", vd::transposed, "^T");
      split_k(batch, "input_grad", dlogits, *table_t, dh, m, v, hidden);
      return;
    }
    if (path_ == GemmPath::fixed_order) {
      // dh = dlogits · (tableᵀ)ᵀ: the forward kernel over the transposed table, K' = V in order.
      auto table_t = vd::shared_parameter(batch, "table", vd::transposed, "^T");
      cuda::fixed_order_gemm_forced(dtype, batch.spec->forced_path, dlogits, table_t->get(), dh, m,
                                    hidden, v, nullptr);
      return;
    }
    auto table = vd::shared_parameter(batch, "table");
    LtConfig config =
        path_ == GemmPath::cublaslt_pinned
            ? pinned(batch, "input_grad", m)
            : heuristic(batch, "input_grad", cuda::lt_heuristic_config_nn(dtype, m, v, hidden), m);
    cuda::lt_gemm_nn(config, dtype, dlogits, table->get(), dh, m, v, hidden, workspace(),
                     lt_workspace_bytes, nullptr);
  }

  // dtable[V,H] += dlogits[T,V]ᵀ · h[T,H] over T real tokens, packed in token order on the device.
  void table_grad_device(Batch& batch, const void* dlogits, const void* h, std::int64_t tokens,
                         DeviceBuffer& dtable) override {
    const std::int64_t v = batch.spec->dim("V"), hidden = batch.spec->dim("H");
    const cuda::GemmDType dtype = vd::device_dtype(batch.spec->dtype);
    if (path_ != GemmPath::cublaslt_heuristic) {
      // Both invariant paths: one FMA per token into the running dtable value, in token order, so
      // any split of the tokens into invocations (down to one token each) gives the same bits.
      cuda::fixed_order_gemm_dw_accumulate(dtype, dlogits, h, dtable.as<float>(), tokens, v, hidden,
                                           nullptr);
      record(batch, "weight_grad", {{"path", "fixed-order token-sequential dw"}});
      return;
    }
    LtConfig config = heuristic(batch, "weight_grad",
                                cuda::lt_heuristic_config_dw(dtype, v, hidden, tokens), tokens);
    cuda::lt_gemm_dw_chunk(config, dtype, dlogits, h, dtable.as<float>(), tokens, v, hidden, true,
                           workspace(), lt_workspace_bytes, nullptr);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    if (spec.pass != Pass::forward || path_ == GemmPath::split_k_by_rows) return std::nullopt;
    return benchmark_logits(*this, spec, settings);
  }

  void* workspace() {
    if (!workspace_.get()) workspace_ = DeviceBuffer(lt_workspace_bytes);
    return workspace_.get();
  }

  LtConfig pinned(Batch& batch, const std::string& form, std::int64_t rows) {
    return pinned_config(batch.spec->dtype, form, batch.spec->dim("V"), batch.spec->dim("H"), rows,
                         &batch);
  }

  // The pinned configuration for a GEMM of `rows` rows: a bucketed pin (the same key as a matmul of
  // N = V, K = H) picks its bucket by M, all buckets one bit-class.
  static LtConfig pinned_config(DType host_dtype, const std::string& form, std::int64_t v,
                                std::int64_t hidden, std::int64_t rows, Batch* batch) {
    const cuda::GemmDType dtype = vd::device_dtype(host_dtype);
    cuda::DeviceInfo device = cuda::query_device();
    cuda::PinKey key{
        device.arch(), device.cublaslt_version, to_string(host_dtype), form, v, hidden, 0};
    const cuda::PinnedConfig found = cuda::lookup_pin(key, rows, [&] {
      return form == "forward" ? cuda::lt_derive_pinned_config(dtype, v, hidden)
                               : cuda::lt_derive_pinned_config_nn(dtype, v, hidden);
    });
    if (batch) {
      record(*batch, form, found.record());
      found.record_path();
    }
    return found.config();
  }

 private:
  // The control's product: out[M,C] = x[M,R] · w[C,R]ᵀ split into partials over R when the
  // invocation holds few real rows (cuda::split_k_gemm works on host rows of x).
  static void split_k(Batch& batch, const std::string& form, const void* x, const DeviceBuffer& w,
                      void* out, std::int64_t m, std::int64_t reduction, std::int64_t columns) {
    const int parts =
        batch.invocation->valid_rows() < cuda::split_k_below_rows ? cuda::split_k_parts : 1;
    record_path(parts > 1 ? "rows.split-k" : "rows.whole");
    const DType dtype = batch.spec->dtype;
    Tensor x_host(dtype, {m, reduction}), out_host(dtype, {m, columns});
    DeviceBuffer staged(std::max<std::size_t>(x_host.bytes(), 16));
    cuda::copy_device_to_device(staged.get(), x, x_host.bytes());
    vd::download(staged, x_host);
    cuda::split_k_gemm(x_host, w, columns, parts, out_host);
    DeviceBuffer result = vd::upload(out_host);
    cuda::copy_device_to_device(out, result.get(), out_host.bytes());
    record(batch, form, {{"split_k_parts", parts}});
  }

  static LtConfig heuristic(Batch& batch, const std::string& form, const LtConfig& config,
                            std::int64_t m) {
    nlohmann::json j = cuda::lt_config_to_json(config);
    j["source"] = "heuristic at M=" + std::to_string(m);
    record(batch, form, j);
    record_path("heuristic");
    return config;
  }

  static void record(Batch& batch, const std::string& form, const nlohmann::json& config) {
    if (batch.impl_config.is_null()) batch.impl_config = nlohmann::json::object();
    batch.impl_config["gemm"][form] = config;
  }

  GemmPath path_;
  DeviceBuffer workspace_;
};

// Times logits = h · tableᵀ on the device (the forward product both ops start with).
BenchMeasurement benchmark_logits(LmHeadGemms& gemms, const CaseSpec& spec,
                                  const BenchSettings& settings) {
  const std::int64_t m = spec.rows, v = spec.dim("V"), hidden = spec.dim("H");
  const cuda::GemmDType dtype = vd::device_dtype(spec.dtype);
  const std::size_t element = dtype_size(spec.dtype);
  const std::size_t table_bytes = static_cast<std::size_t>(v * hidden) * element;
  const std::size_t set_bytes = static_cast<std::size_t>(m * hidden + m * v) * element;
  // The table (>= 256 MiB at Llama vocabularies) is read whole each launch; h and logits rotate.
  const std::size_t sets = vd::rotation_sets(
      set_bytes + (table_bytes >= (std::size_t(256) << 20) ? 0 : table_bytes), settings);
  DeviceBuffer table = vd::random_input(table_bytes, spec.dtype, 1);
  std::vector<DeviceBuffer> hs, outs;
  for (std::size_t i = 0; i < sets; ++i) {
    hs.push_back(
        vd::random_input(static_cast<std::size_t>(m * hidden) * element, spec.dtype, 2 + i));
    outs.emplace_back(static_cast<std::size_t>(m * v) * element);
  }
  LtConfig config;
  if (gemms.path() == GemmPath::cublaslt_pinned)
    config = LmHeadGemms::pinned_config(spec.dtype, "forward", v, hidden, m, nullptr);
  if (gemms.path() == GemmPath::cublaslt_heuristic)
    config = cuda::lt_heuristic_config(dtype, m, v, hidden);
  BenchMeasurement measurement = vd::time_rotated(settings, sets, [&](std::size_t i) {
    if (gemms.path() == GemmPath::fixed_order) {
      cuda::fixed_order_gemm(dtype, hs[i].get(), table.get(), outs[i].get(), m, v, hidden, nullptr);
    } else {
      cuda::lt_gemm(config, dtype, hs[i].get(), table.get(), outs[i].get(), m, v, hidden,
                    gemms.workspace(), lt_workspace_bytes, nullptr);
    }
  });
  measurement.flops =
      2.0 * static_cast<double>(m) * static_cast<double>(v) * static_cast<double>(hidden);
  measurement.bytes_moved = static_cast<double>(set_bytes + table_bytes);
  measurement.config = gemms.path() == GemmPath::fixed_order
                           ? nlohmann::json{{"path", cuda::fixed_order_gemm_path(dtype)}}
                           : cuda::lt_config_to_json(config);
  measurement.config["rotation_sets"] = sets;
  return measurement;
}

}  // namespace

std::unique_ptr<Gemms> make_gemms(GemmPath path) {
  return std::make_unique<LmHeadGemms>(path);
}

}  // namespace lm_head

namespace {

using lm_head::GemmPath;
namespace vd = vocab_device;
using cuda::DeviceBuffer;

class CudaLmHead : public Impl {
 public:
  explicit CudaLmHead(GemmPath path)
      : Impl(lm_head::gemm_info(path).reading_row_inputs_on_device()), gemms_(path) {}

  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    return lm_head::gemm_switch_points(gemms_.path(), spec, max_rows);
  }
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    return lm_head::gemm_skip_reason(gemms_.path(), spec);
  }

  void run(Batch& batch) override {
    const std::int64_t m = batch.slots();
    auto table = vd::shared_parameter(batch, "table");
    if (batch.spec->pass == Pass::forward) {
      DeviceBuffer h = vd::input_rows(batch, "h");
      Tensor& logits = batch.out("logits");
      DeviceBuffer logits_device(logits.bytes());
      gemms_.logits(batch, h.get(), table->get(), logits_device.get(), m);
      cuda_support::hand_over_rows(batch, "logits", logits_device);
      return;
    }
    DeviceBuffer dlogits = vd::input_rows(batch, "dlogits");
    Tensor& dh = batch.out("dh");
    DeviceBuffer dh_device(dh.bytes());
    gemms_.input_grad(batch, dlogits.get(), dh_device.get(), m);
    cuda_support::hand_over_rows(batch, "dh", dh_device);
    if (!batch.reductions_wanted) return;  // no check reads this layout's dtable
    std::vector<std::int32_t> slots = vd::real_slot_list(batch);
    DeviceBuffer& dtable = vd::carried_accumulator(batch, "dtable");
    if (slots.empty()) {
      vd::download_after_last(batch, "dtable", dtable);
      return;
    }
    // The real rows packed on the device (from the chain's device inputs or uploaded).
    DeviceBuffer dlogits_packed = vd::packed_input_rows(batch, "dlogits", slots);
    DeviceBuffer h_packed = vd::packed_input_rows(batch, "h", slots);
    gemms_.table_grad_device(batch, dlogits_packed.get(), h_packed.get(),
                             static_cast<std::int64_t>(slots.size()), dtable);
    vd::download_after_last(batch, "dtable", dtable);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    return gemms_.benchmark(spec, settings);
  }

 private:
  lm_head::LmHeadGemms gemms_;
};

}  // namespace

void register_lm_head_cuda(Registry& registry) {
  for (GemmPath path : {GemmPath::fixed_order, GemmPath::cublaslt_pinned,
                        GemmPath::cublaslt_heuristic, GemmPath::split_k_by_rows})
    registry.add_impl("lm_head", std::make_unique<CudaLmHead>(path));
}

}  // namespace bitcheck
