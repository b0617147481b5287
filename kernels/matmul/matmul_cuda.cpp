// CUDA impls of matmul: our fixed-order GEMM, cuBLASLt with a pinned configuration, and the
// cuBLASLt heuristic as the control. Host adapters: upload the batch, launch, download, record the
// configuration used; and the device-resident benchmark of each.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/runtime.h"
#include "core/op.h"
#include "cublaslt_gemm.h"
#include "fixed_order_gemm.h"
#include "matmul/matmul.h"
#include "matmul/pin_lookup.h"
#include "matmul/split_k_control.h"

namespace bitcheck {
namespace {

using cuda::DeviceBuffer;
using cuda::GemmDType;
using cuda::LtConfig;
using cuda_support::download;
using cuda_support::real_slot_list;
using cuda_support::upload;

// cuBLASLt dW chunks: tokens are reduced in chunks of exactly this many (zero-padded), summed in
// order; micro-batch boundaries on multiples of it keep every chunk, and so every bit, the same.
constexpr std::int64_t lt_dw_chunk_tokens = 256;
constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

class CudaMatmul : public Impl {
 public:
  enum class Kind { fixed_order, cublaslt_pinned, cublaslt_heuristic, split_k_by_rows };
  CudaMatmul(ImplInfo info, Kind kind) : Impl(std::move(info)), kind_(kind) {}

  std::int64_t token_granularity() const override {
    return kind_ == Kind::cublaslt_pinned ? lt_dw_chunk_tokens : 1;
  }
  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    if (!cuda::query_device().available) return {};
    const GemmDType dtype = cuda_support::device_dtype(spec.dtype);
    const std::int64_t n = spec.dim("N"), k = spec.dim("K");
    // The forward's N is N; the input gradient's (dX = dY·W) is K.
    const std::int64_t out_columns = spec.pass == Pass::forward ? n : k;
    switch (kind_) {
      case Kind::fixed_order:
        return switch_points_of(
            [&](std::int64_t m) { return cuda::fixed_order_gemm_path_for(dtype, m, out_columns); },
            max_rows);
      case Kind::cublaslt_pinned: {
        const cuda::DeviceInfo device = cuda::query_device();
        cuda::PinKey key{device.arch(),
                         device.cublaslt_version,
                         to_string(spec.dtype),
                         spec.pass == Pass::forward ? "forward" : "input_grad",
                         n,
                         k,
                         0};
        return cuda::pin_switch_points(key, max_rows);
      }
      case Kind::split_k_by_rows:
        return {{cuda::split_k_below_rows, "rows.split-k", "rows.whole"}};
      default:
        return {};
    }
  }
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if ((kind_ == Kind::fixed_order || kind_ == Kind::split_k_by_rows) &&
        (spec.dim("N") % 8 || spec.dim("K") % 8)) {
      return "fixed-order GEMM needs N and K multiples of 8";
    }
    return std::nullopt;
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const std::int64_t n = spec.dim("N"), k = spec.dim("K"), m = batch.slots();
    const GemmDType dtype = cuda_support::device_dtype(spec.dtype);
    if (kind_ == Kind::split_k_by_rows) {
      run_split_k(batch, dtype, n, k);
      return;
    }
    const DeviceBuffer& w = device_parameter(batch, "w", false);
    if (spec.pass == Pass::forward) {
      DeviceBuffer x = cuda_support::input_rows(batch, "x");
      Tensor& y = batch.out("y");
      DeviceBuffer y_device(y.bytes());
      forward(dtype, x.get(), w.get(), y_device.get(), m, n, k, batch);
      cuda_support::hand_over_rows(batch, "y", y_device);
      return;
    }
    DeviceBuffer dy = cuda_support::input_rows(batch, "dy");
    Tensor& dx = batch.out("dx");
    DeviceBuffer dx_device(dx.bytes());
    input_grad(dtype, dy.get(), batch, dx_device.get(), m, n, k);
    cuda_support::hand_over_rows(batch, "dx", dx_device);
    weight_grad(dtype, batch, n, k);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override;

 private:
  // Parameters stay on the device across invocations and cases (cuda_support::ParameterCache).
  const DeviceBuffer& device_parameter(const Batch& batch, const std::string& name,
                                       bool transposed) {
    return parameters_.get(batch, name, transposed);
  }

  DeviceBuffer& workspace() {
    if (!workspace_.get()) workspace_ = DeviceBuffer(lt_workspace_bytes);
    return workspace_;
  }

  // The pinned configuration for a GEMM of `rows` rows (weight_grad: the chunk's tokens). A
  // bucketed pin picks the bucket by M: invariant because every configuration of its table is one
  // bit-class.
  LtConfig pinned(const char* form, GemmDType dtype, DType host_dtype, std::int64_t n,
                  std::int64_t k, std::int64_t chunk, Batch* batch, std::int64_t rows = 0) {
    cuda::DeviceInfo device = cuda::query_device();
    cuda::PinKey key{device.arch(), device.cublaslt_version, to_string(host_dtype), form, n, k,
                     chunk};
    const cuda::PinnedConfig found = cuda::lookup_pin(key, rows > 0 ? rows : chunk, [&] {
      std::string f = form;
      if (f == "forward") return cuda::lt_derive_pinned_config(dtype, n, k);
      if (f == "input_grad") return cuda::lt_derive_pinned_config_nn(dtype, n, k);
      return cuda::lt_derive_pinned_config_dw(dtype, n, k, chunk);
    });
    if (std::string(form) == "weight_grad") {
      record_path("dw.chunks-256");
    } else {
      found.record_path();
    }
    if (batch) {
      // The runner keeps one invocation's record per case; the pin file is named by `source`.
      if (batch->impl_config.is_null()) batch->impl_config = nlohmann::json::object();
      batch->impl_config["cublaslt"][form] = found.record();
    }
    return found.config();
  }

  static void record(Batch& batch, const std::string& form, const LtConfig& config,
                     const std::string& source) {
    nlohmann::json j = cuda::lt_config_to_json(config);
    j["source"] = source;
    if (batch.impl_config.is_null()) batch.impl_config = nlohmann::json::object();
    batch.impl_config["cublaslt"][form] = j;
  }

  // The control: split when the invocation holds few real rows (alone, small micro-batches).
  void run_split_k(Batch& batch, GemmDType dtype, std::int64_t n, std::int64_t k) {
    const int parts =
        batch.invocation->valid_rows() < cuda::split_k_below_rows ? cuda::split_k_parts : 1;
    record_path(parts > 1 ? "rows.split-k" : "rows.whole");
    batch.impl_config = {{"split_k_parts", parts}};
    if (batch.spec->pass == Pass::forward) {
      cuda::split_k_gemm(batch.in("x"), device_parameter(batch, "w", false), n, parts,
                         batch.out("y"));
      return;
    }
    // dX[M,K] = dY[M,N] · W = dY · (Wᵀ)ᵀ: the reduction runs over N.
    cuda::split_k_gemm(batch.in("dy"), device_parameter(batch, "w", true), k, parts,
                       batch.out("dx"));
    weight_grad(dtype, batch, n, k);
  }

  void forward(GemmDType dtype, const void* x, const void* w, void* y, std::int64_t m,
               std::int64_t n, std::int64_t k, Batch& batch) {
    switch (kind_) {
      case Kind::fixed_order:
        cuda::fixed_order_gemm_forced(dtype, batch.spec->forced_path, x, w, y, m, n, k, nullptr);
        batch.impl_config = {{"path", cuda::fixed_order_gemm_path(dtype)}};
        return;
      case Kind::cublaslt_pinned: {
        LtConfig config = pinned("forward", dtype, batch.spec->dtype, n, k, 0, &batch, m);
        cuda::lt_gemm(config, dtype, x, w, y, m, n, k, workspace().get(), lt_workspace_bytes,
                      nullptr);
        return;
      }
      case Kind::cublaslt_heuristic: {
        LtConfig config = cuda::lt_heuristic_config(dtype, m, n, k);
        record(batch, "forward", config, "heuristic at M=" + std::to_string(m));
        cuda::lt_gemm(config, dtype, x, w, y, m, n, k, workspace().get(), lt_workspace_bytes,
                      nullptr);
        return;
      }
      case Kind::split_k_by_rows:
        throw std::logic_error("the split-K control computes through run_split_k");
    }
  }

  void input_grad(GemmDType dtype, const void* dy, Batch& batch, void* dx, std::int64_t m,
                  std::int64_t n, std::int64_t k) {
    if (kind_ == Kind::fixed_order) {
      // dX = dY · W = dY · (W^T)^T: the forward kernel over the transposed weight, K' = N.
      const DeviceBuffer& w_t = device_parameter(batch, "w", true);
      cuda::fixed_order_gemm_forced(dtype, batch.spec->forced_path, dy, w_t.get(), dx, m, k, n,
                                    nullptr);
      return;
    }
    const DeviceBuffer& w = device_parameter(batch, "w", false);
    LtConfig config = kind_ == Kind::cublaslt_pinned
                          ? pinned("input_grad", dtype, batch.spec->dtype, n, k, 0, &batch, m)
                          : cuda::lt_heuristic_config_nn(dtype, m, n, k);
    if (kind_ == Kind::cublaslt_heuristic)
      record(batch, "input_grad", config, "heuristic at M=" + std::to_string(m));
    cuda::lt_gemm_nn(config, dtype, dy, w.get(), dx, m, n, k, workspace().get(), lt_workspace_bytes,
                     nullptr);
  }

  // The dW accumulator stays on the device for the whole layout (every micro-batch adds into
  // it) and comes back once, after the last invocation.
  void weight_grad(GemmDType dtype, Batch& batch, std::int64_t n, std::int64_t k) {
    if (!batch.reductions_wanted) return;  // no check reads this layout's dW
    DeviceBuffer& dw = cuda_support::carried_accumulator(batch, "dw");
    accumulate_weight_grad(dtype, batch, dw, n, k);
    cuda_support::download_after_last(batch, "dw", dw);
  }

  void accumulate_weight_grad(GemmDType dtype, Batch& batch, DeviceBuffer& dw_device,
                              std::int64_t n, std::int64_t k) {
    const std::vector<std::int32_t> slots = real_slot_list(batch);
    const auto tokens = static_cast<std::int64_t>(slots.size());
    if (tokens == 0) return;
    // The real rows packed, on the device (from the chain's device inputs or uploaded).
    DeviceBuffer dy_device = cuda_support::packed_input_rows(batch, "dy", slots);
    DeviceBuffer x_device = cuda_support::packed_input_rows(batch, "x", slots);
    if (kind_ == Kind::fixed_order || kind_ == Kind::split_k_by_rows) {
      cuda::fixed_order_gemm_dw_accumulate(dtype, dy_device.get(), x_device.get(),
                                           dw_device.as<float>(), tokens, n, k, nullptr);
    } else if (kind_ == Kind::cublaslt_heuristic) {
      LtConfig config = cuda::lt_heuristic_config_dw(dtype, n, k, tokens);
      record(batch, "weight_grad", config, "heuristic at T=" + std::to_string(tokens));
      cuda::lt_gemm_dw_chunk(config, dtype, dy_device.get(), x_device.get(), dw_device.as<float>(),
                             tokens, n, k, true, workspace().get(), lt_workspace_bytes, nullptr);
    } else {
      LtConfig config =
          pinned("weight_grad", dtype, batch.spec->dtype, n, k, lt_dw_chunk_tokens, &batch);
      // Chunks of exactly lt_dw_chunk_tokens tokens, the last one zero-padded, added in order.
      const std::int64_t chunks = (tokens + lt_dw_chunk_tokens - 1) / lt_dw_chunk_tokens;
      const std::size_t element = dtype_size(batch.spec->dtype);
      const std::size_t dy_chunk_bytes = static_cast<std::size_t>(lt_dw_chunk_tokens * n) * element;
      const std::size_t x_chunk_bytes = static_cast<std::size_t>(lt_dw_chunk_tokens * k) * element;
      DeviceBuffer dy_chunked(static_cast<std::size_t>(chunks) * dy_chunk_bytes);
      DeviceBuffer x_chunked(static_cast<std::size_t>(chunks) * x_chunk_bytes);
      dy_chunked.fill_bytes(0);
      x_chunked.fill_bytes(0);
      cuda::copy_device_to_device(dy_chunked.get(), dy_device.get(),
                                  static_cast<std::size_t>(tokens * n) * element);
      cuda::copy_device_to_device(x_chunked.get(), x_device.get(),
                                  static_cast<std::size_t>(tokens * k) * element);
      for (std::int64_t c = 0; c < chunks; ++c) {
        cuda::lt_gemm_dw_chunk(
            config, dtype, static_cast<const char*>(dy_chunked.get()) + c * dy_chunk_bytes,
            static_cast<const char*>(x_chunked.get()) + c * x_chunk_bytes, dw_device.as<float>(),
            lt_dw_chunk_tokens, n, k, true, workspace().get(), lt_workspace_bytes, nullptr);
      }
    }
  }

  Kind kind_;
  cuda_support::ParameterCache& parameters_ = cuda_support::ParameterCache::process();
  DeviceBuffer workspace_;
};

std::optional<BenchMeasurement> CudaMatmul::benchmark(const CaseSpec& spec,
                                                      const BenchSettings& settings) {
  if (spec.pass != Pass::forward || kind_ == Kind::split_k_by_rows)
    return std::nullopt;  // the GEMM benchmark times the forward product of the GEMM impls
  const std::int64_t m = spec.rows, n = spec.dim("N"), k = spec.dim("K");
  const GemmDType dtype = cuda_support::device_dtype(spec.dtype);
  const std::size_t element = dtype_size(spec.dtype);
  const std::size_t set_bytes = static_cast<std::size_t>(m * k + n * k + m * n) * element;
  // Rotate through enough input sets that the working set exceeds the caches, within memory.
  const std::size_t sets = cuda_bench::rotation_sets(set_bytes, settings);
  std::vector<DeviceBuffer> xs, ws, ys;
  std::vector<std::uint16_t> pattern;
  for (std::size_t i = 0; i < sets; ++i) {
    xs.push_back(
        cuda_bench::random_input(static_cast<std::size_t>(m * k) * element, spec.dtype, 2 * i + 1));
    ws.push_back(
        cuda_bench::random_input(static_cast<std::size_t>(n * k) * element, spec.dtype, 2 * i + 2));
    ys.emplace_back(static_cast<std::size_t>(m * n) * element);
  }
  BenchMeasurement measurement;
  LtConfig config;
  if (kind_ == Kind::cublaslt_pinned)
    config = pinned("forward", dtype, spec.dtype, n, k, 0, nullptr, m);
  if (kind_ == Kind::cublaslt_heuristic) config = cuda::lt_heuristic_config(dtype, m, n, k);
  auto launch = [&](std::size_t i) {
    if (kind_ == Kind::fixed_order) {
      cuda::fixed_order_gemm(dtype, xs[i].get(), ws[i].get(), ys[i].get(), m, n, k, nullptr);
    } else {
      cuda::lt_gemm(config, dtype, xs[i].get(), ws[i].get(), ys[i].get(), m, n, k,
                    workspace().get(), lt_workspace_bytes, nullptr);
    }
  };
  measurement = cuda_bench::time_rotated(settings, sets, launch);
  measurement.flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  measurement.bytes_moved = static_cast<double>(set_bytes);
  if (kind_ == Kind::fixed_order) {
    measurement.config = {{"path", cuda::fixed_order_gemm_path(dtype)}};
    if (std::string(cuda::fixed_order_gemm_path(dtype)) != "portable-fma") {
      const cuda::detail::GemmTile tile =
          cuda::detail::fixed_order_gemm_chosen_tile(m, n, cuda::query_device().sm_count);
      measurement.config["tile"] = tile.name();
      measurement.config["describe"] =
          "wgmma-tma tile " + measurement.config["tile"].get<std::string>();
    }
  } else {
    measurement.config = cuda::lt_config_to_json(config);
  }
  return measurement;
}

}  // namespace

void register_matmul_cuda(Registry& registry) {
  registry.add_run_hook(cuda::pin_table_run_hook());
  using Kind = CudaMatmul::Kind;
  // The split-K control's partials and dW go through the fixed-order GEMM, whose paths are shown.
  std::vector<PathDecl> split_k_paths = {
      PathDecl("rows.split-k", "fewer than 4 rows: the K sum split in 4 partials"),
      PathDecl("rows.whole", "4 rows or more: the fixed-order GEMM's whole K sum")};
  for (PathDecl decl : cuda::fixed_order_gemm_paths()) split_k_paths.push_back(decl.informative());
  register_impls<CudaMatmul, Kind>(
      registry, "matmul",
      {{ImplInfo::invariant(
            "fixed-order", "cuda",
            "our GEMM: wgmma m64nNk16 (N = 64/128/256 by shape) over K blocks of "
            "64 in order (portable fp32 FMA chain for fp32), no split-K; dW one FMA "
            "per token in token order")
            .with_paths(cuda::fixed_order_gemm_paths())
            .reading_row_inputs_on_device(),
        Kind::fixed_order},
       {ImplInfo::invariant("cublaslt-pinned", "cuda",
                            "cuBLASLt with the pin table's configuration per (arch, cuBLASLt, "
                            "dtype, N, K): one split-K-1 configuration, or one per M bucket all of "
                            "one bit-class (bitcheck algos); dW in fixed 256-token chunks summed "
                            "in order")
            .with_paths({PathDecl("bucket",
                                  "a bucketed pin's configuration for the M bucket (member: rows)")
                             .as_family(),
                         PathDecl("pinned", "an unbucketed pin: one configuration for every M"),
                         PathDecl("dw.chunks-256", "dW in fixed 256-token chunks added in order")})
            .reading_row_inputs_on_device(),
        Kind::cublaslt_pinned},
       // The library default: whether it drifts depends on the GPU, the shape and the cuBLASLt
       // version, so its cases are observations (the split-K-by-rows control drifts always).
       {ImplInfo::library_default("cublaslt-heuristic", "cuda",
                                  "library default (observed): heuristic configuration per shape "
                                  "(split-K chosen per M), dW over the invocation's tokens at once")
            .with_paths({PathDecl("heuristic", "cuBLASLt's heuristic configuration per shape")})
            .reading_row_inputs_on_device(),
        Kind::cublaslt_heuristic},
       {ImplInfo::control("split-k-by-rows", "cuda",
                          "control: with fewer than 4 rows, the fixed-order GEMM's K sum (dX: N "
                          "sum) split into 4 partials reduced in the output dtype, like a library "
                          "heuristic choosing split-K for small M; dW as fixed-order")
            .with_paths(split_k_paths),
        Kind::split_k_by_rows}});
}

}  // namespace bitcheck
