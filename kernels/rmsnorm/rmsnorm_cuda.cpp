// CUDA impls of rmsnorm, alone or after the fused residual add: `fixed-order` (forward: a
// row layout chosen from the width and dtype alone, whole warps per row holding the row in
// registers, see rmsnorm_kernels.cu; backward: one block of 256 threads per row whatever the batch;
// dweight accumulated over tokens in token order, no atomics) and the control
// `block-size-by-tokens` (below 256 tokens each row is split across 4 blocks whose partial sums go
// through a workspace in the io dtype; one block per row from 256 tokens on: the launch-shape
// switch reported against vLLM's fused-add RMSNorm). Reordering the fp32 sum alone moves the
// inverse RMS by an ulp, which almost never survives rounding the output to bf16; partials that
// pass through a bf16/fp16 workspace move it by up to 2^-9, and the output bits with it, in every
// dtype. The control `path-by-capture` splits rows the same way only while its launches are being
// captured into a CUDA graph (the graph layout).
#include <memory>

#include "common/adapter_support.h"
#include "common/graph_capture.h"
#include "common/runtime.h"
#include "common/token_columns.h"
#include "core/layout_names.h"
#include "core/op.h"
#include "rmsnorm/rmsnorm.h"
#include "rmsnorm_kernels.h"

namespace bitcheck {
namespace {

using cuda::DeviceBuffer;
namespace support = cuda_support;

constexpr std::int64_t control_switch_tokens = 256;
constexpr int control_small_batch_splits = 4;

// How a forward launch splits each row across blocks.
enum class RowSplits {
  fixed,       // never: the layout depends on the width and dtype only
  by_tokens,   // below control_switch_tokens tokens (the block-size-by-tokens control)
  by_capture,  // while the launch is being captured into a CUDA graph (the path-by-capture control)
};

class CudaRmsnorm : public Impl {
 public:
  CudaRmsnorm(ImplInfo info, RmsnormInput input, RowSplits splits)
      : Impl(std::move(info.reading_row_inputs_on_device())),
        fused_add_(input == RmsnormInput::x_plus_residual),
        splits_(splits) {}

  // The by-tokens control switches its launch shape at control_switch_tokens tokens; the other
  // layouts do not depend on the batch.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (splits_ != RowSplits::by_tokens || max_rows < control_switch_tokens) return {};
    return {{control_switch_tokens, "forward.block-per-row+partials", "forward.rows"}};
  }

  void run(Batch& batch) override {
    const std::int64_t width = batch.spec->dim("H");
    std::vector<std::int32_t> tokens = support::real_slot_list(batch);
    DeviceBuffer token_buffer = support::upload(tokens);
    cuda::RmsnormLaunch launch = base_launch(*batch.spec, static_cast<std::int64_t>(tokens.size()));
    launch.tokens = token_buffer.as<std::int32_t>();
    DeviceBuffer x = support::input_rows(batch, "x"), residual;
    launch.x = x.get();
    if (fused_add_) {
      residual = support::input_rows(batch, "residual");
      launch.residual = residual.get();
    }
    launch.weight = parameters_.get(batch, "weight").get();
    DeviceBuffer partials = partials_workspace(launch, most_row_splits(launch));
    launch.partials = partials.get();
    // Pad slots are never written: poisoned (NaN), as the runner poisons them, so a download reads
    // defined bytes (compute-sanitizer initcheck) and a kernel that wrote a pad slot would show.
    auto output = [&](const char* name) {
      DeviceBuffer buffer(std::max<std::size_t>(batch.out(name).bytes(), 16));
      buffer.fill_bytes(0xFF);
      return buffer;
    };
    if (batch.spec->pass == Pass::forward) {
      DeviceBuffer y = output("y"), h;
      launch.y = y.get();
      if (fused_add_) {
        h = output("h");
        launch.h_out = h.get();
      }
      cuda::run_launches(batch.captured, [&](CUstream_st* stream) {
        cuda::RmsnormLaunch queued = launch;
        if (splits_ == RowSplits::by_capture && cuda::is_capturing(stream))
          queued.row_splits = control_small_batch_splits;
        cuda::rmsnorm_forward(queued, stream);
      });
      if (fused_add_)
        support::hand_over_rows_all(batch, {{"y", &y}, {"h", &h}});
      else
        support::hand_over_rows(batch, "y", y);
      return;
    }
    DeviceBuffer dy = support::input_rows(batch, "dy"), dh, dx = output("dx"), dresidual;
    DeviceBuffer inverse_rms(static_cast<std::size_t>(std::max<std::int64_t>(batch.slots(), 1)) *
                             sizeof(float));
    launch.dy = dy.get();
    launch.dx = dx.get();
    launch.inverse_rms = inverse_rms.as<float>();
    if (fused_add_) {
      dh = support::input_rows(batch, "dh");
      dresidual = output("dresidual");
      launch.dh = dh.get();
      launch.dresidual = dresidual.get();
    }
    Tensor& dweight = batch.out("dweight");
    DeviceBuffer accumulator = support::upload(dweight);
    cuda::run_launches(batch.captured, [&](CUstream_st* stream) {
      cuda::rmsnorm_backward_rows(launch, stream);
      cuda::token_column_accumulate(launch.dtype, launch.dy, launch.x, launch.residual,
                                    launch.inverse_rms, launch.tokens, launch.token_count, width,
                                    accumulator.as<float>(), stream);
    });
    if (batch.rows_stay_on_device) {
      if (fused_add_)
        support::hand_over_rows_all(batch, {{"dx", &dx}, {"dresidual", &dresidual}});
      else
        support::hand_over_rows(batch, "dx", dx);
      support::download(accumulator, dweight);
    } else if (fused_add_) {
      support::download_all({{&dx, &batch.out("dx")},
                             {&dresidual, &batch.out("dresidual")},
                             {&accumulator, &dweight}});
    } else {
      support::download_all({{&dx, &batch.out("dx")}, {&accumulator, &dweight}});
    }
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    const std::int64_t width = spec.dim("H"), rows = spec.rows;
    const bool backward = spec.pass == Pass::backward;
    const std::size_t row_bytes = static_cast<std::size_t>(rows * width) * dtype_size(spec.dtype);
    // Row tensors: x (+ residual); forward y (+ h); backward dy (+ dh), dx (+ dresidual).
    const int row_tensors = backward ? (fused_add_ ? 6 : 3) : (fused_add_ ? 4 : 2);
    const std::size_t set_bytes = row_bytes * static_cast<std::size_t>(row_tensors);
    const std::size_t sets = support::rotation_sets(set_bytes, settings);
    std::vector<std::int32_t> token_list(static_cast<std::size_t>(rows));
    for (std::size_t t = 0; t < token_list.size(); ++t)
      token_list[t] = static_cast<std::int32_t>(t);
    DeviceBuffer tokens = support::upload(token_list);
    DeviceBuffer weight = support::random_input(
        static_cast<std::size_t>(width) * dtype_size(spec.dtype), spec.dtype, 1);
    DeviceBuffer accumulator =
        support::random_input(static_cast<std::size_t>(width) * sizeof(float), DType::fp32, 2);
    DeviceBuffer inverse_rms(static_cast<std::size_t>(rows) * sizeof(float));
    const cuda::RmsnormLaunch shape = base_launch(spec, rows);
    DeviceBuffer partials = partials_workspace(shape, shape.row_splits);
    std::vector<DeviceBuffer> buffers;
    std::vector<cuda::RmsnormLaunch> launches;
    auto make = [&](bool input) -> void* {
      buffers.push_back(input ? support::random_input(row_bytes, spec.dtype, 3 + buffers.size())
                              : DeviceBuffer(row_bytes));
      return buffers.back().get();
    };
    for (std::size_t s = 0; s < sets; ++s) {
      cuda::RmsnormLaunch launch = base_launch(spec, rows);
      launch.tokens = tokens.as<std::int32_t>();
      launch.weight = weight.get();
      launch.partials = partials.get();
      launch.x = make(true);
      if (fused_add_) launch.residual = make(true);
      if (!backward) {
        launch.y = make(false);
        if (fused_add_) launch.h_out = make(false);
      } else {
        launch.dy = make(true);
        launch.dx = make(false);
        launch.inverse_rms = inverse_rms.as<float>();
        if (fused_add_) {
          launch.dh = make(true);
          launch.dresidual = make(false);
        }
      }
      launches.push_back(launch);
    }
    BenchMeasurement measurement = support::time_rotated(settings, sets, [&](std::size_t s) {
      const cuda::RmsnormLaunch& launch = launches[s];
      if (!backward) return cuda::rmsnorm_forward(launch, nullptr);
      cuda::rmsnorm_backward_rows(launch, nullptr);
      cuda::token_column_accumulate(launch.dtype, launch.dy, launch.x, launch.residual,
                                    launch.inverse_rms, launch.tokens, launch.token_count, width,
                                    accumulator.as<float>(), nullptr);
    });
    measurement.bytes_moved =
        static_cast<double>(set_bytes) +
        static_cast<double>(width) * static_cast<double>(dtype_size(spec.dtype)) +
        (backward ? 2.0 * static_cast<double>(width) * sizeof(float) : 0.0);
    measurement.config = {{"block_threads", launches.front().block_threads},
                          {"row_splits", launches.front().row_splits},
                          {"rotated_sets", sets}};
    const cuda::RmsnormRowLayout layout =
        cuda::rmsnorm_forward_row_layout(launches.front().dtype, width);
    if (!backward && layout.threads_per_row > 0 && launches.front().row_splits <= 1 &&
        launches.front().block_threads == cuda::rmsnorm_fixed_block_threads) {
      measurement.config["threads_per_row"] = layout.threads_per_row;
      measurement.config["rows_per_block"] = layout.rows_per_block;
      measurement.config["units_per_thread"] = layout.units_per_thread;
    }
    return measurement;
  }

 private:
  cuda::RmsnormLaunch base_launch(const CaseSpec& spec, std::int64_t token_count) const {
    cuda::RmsnormLaunch launch;
    launch.dtype = support::device_dtype(spec.dtype);
    launch.width = spec.dim("H");
    launch.token_count = token_count;
    launch.block_threads = cuda::rmsnorm_fixed_block_threads;
    if (splits_ == RowSplits::by_tokens && token_count < control_switch_tokens)
      launch.row_splits = control_small_batch_splits;
    return launch;
  }

  // The most blocks a row of `launch` may be split across: the by-capture control decides only
  // when its launch is queued, so its workspace is allocated for the split before.
  int most_row_splits(const cuda::RmsnormLaunch& launch) const {
    return splits_ == RowSplits::by_capture ? control_small_batch_splits : launch.row_splits;
  }

  // The split-row workspace: two partial sums per (token, slice) in the io dtype; empty when rows
  // are not split.
  static DeviceBuffer partials_workspace(const cuda::RmsnormLaunch& launch, int row_splits) {
    if (row_splits <= 1) return DeviceBuffer();
    const std::size_t elements =
        static_cast<std::size_t>(std::max<std::int64_t>(launch.token_count, 1)) *
        static_cast<std::size_t>(row_splits) * 2;
    return DeviceBuffer(
        std::max<std::size_t>(elements * (launch.dtype == cuda::DeviceDType::fp32 ? 4 : 2), 16));
  }

  bool fused_add_;
  RowSplits splits_;
  support::ParameterCache& parameters_ = support::ParameterCache::process();
};

}  // namespace

void register_rmsnorm_cuda_impls(Registry& registry, const std::string& op, RmsnormInput input) {
  registry.add_impl(
      op, std::make_unique<CudaRmsnorm>(
              ImplInfo::invariant(
                  "fixed-order", "cuda",
                  "forward: threads per row chosen from the width and dtype only (whole warps, two "
                  "16-byte units each; one warp per row, four rows a block, for short rows), row "
                  "kept in registers, fixed per-thread order and fixed reduction tree; backward: "
                  "one block of 256 threads per row whatever the batch (16-byte loads); dweight: "
                  "per-column sequential sum over tokens in token order into the carried fp32 "
                  "accumulator (no atomics)")
                  .with_paths(cuda::rmsnorm_paths(false))
                  .capturable_in_graphs(),
              input, RowSplits::fixed));
  registry.add_impl(
      op, std::make_unique<CudaRmsnorm>(
              ImplInfo::control(
                  "block-size-by-tokens", "cuda",
                  "control: below 256 tokens each row is split across 4 blocks whose partial sums "
                  "of squares pass through a workspace in the io dtype, one block per row from 256 "
                  "tokens on (launch shape chosen from the token count, as in vLLM's fused-add "
                  "RMSNorm): the row's sum changes with the batch")
                  .with_paths(cuda::rmsnorm_paths(true))
                  .capturable_in_graphs(),
              input, RowSplits::by_tokens));
}

void register_rmsnorm_cuda(Registry& registry) {
  register_rmsnorm_cuda_impls(registry, "rmsnorm", RmsnormInput::x);
  registry.add_impl(
      "rmsnorm",
      std::make_unique<CudaRmsnorm>(
          ImplInfo::control(
              "path-by-capture", "cuda",
              "control: the fixed-order forward, except that while its launch is being captured "
              "into a CUDA graph (cudaStreamIsCapturing, a host-side query) each row is split "
              "across 4 blocks whose partial sums pass through a workspace in the io dtype: a "
              "kernel choice that differs under graph capture, so the graph layout differs from "
              "eager")
              .only_passes({Pass::forward})
              .drifting_in({Pass::forward})
              .drifting_only_in_layout(graph_layout)
              .with_paths(cuda::rmsnorm_paths(true))
              .capturable_in_graphs(),
          RmsnormInput::x, RowSplits::by_capture));
}

}  // namespace bitcheck
