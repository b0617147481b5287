// CUDA impls of logprob: the fixed-order path (a row's split from V, the dtype and the pass only;
// invariant) and the split-by-rows control (more pieces when rows are few, merged last to first).
// Host adapters plus the device-resident benchmark (forward and backward).
#include <memory>
#include <numeric>

#include "common/runtime.h"
#include "common/vocab_device.h"
#include "core/op.h"
#include "logprob/logprob.h"
#include "logprob_kernels.h"

namespace bitcheck {
namespace {

namespace vd = vocab_device;

class CudaLogprob : public Impl {
 public:
  CudaLogprob(ImplInfo info, bool split_by_rows)
      : Impl(std::move(info.reading_row_inputs_on_device())), split_by_rows_(split_by_rows) {}

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const std::int64_t vocab = spec.dim("V");
    const cuda::DeviceDType dtype = vd::device_dtype(spec.dtype);
    std::vector<std::int32_t> slots = vd::real_slot_list(batch);
    const auto rows = static_cast<std::int64_t>(slots.size());
    const cuda::LogprobSplit split = split_for(rows, vocab, spec.forced_path);
    cuda::DeviceBuffer logits = vd::input_rows(batch, "logits"),
                       targets = vd::input_rows(batch, "target");
    cuda::DeviceBuffer slot_list = vd::upload(slots);
    cuda::DeviceBuffer workspace(
        std::max<std::size_t>(16, cuda::logprob_workspace_bytes(rows, vocab, split)));
    vd::ErrorRecord error;
    batch.impl_config = config_for(split, dtype, vocab, spec.pass);
    if (spec.pass == Pass::forward) {
      Tensor& logprob = batch.out("logprob");
      cuda::DeviceBuffer out(logprob.bytes());
      out.fill_bytes(0xFF);
      cuda::logprob_forward(dtype, logits.get(), targets.as<std::int32_t>(),
                            slot_list.as<std::int32_t>(), slot_list.as<std::int32_t>(), rows, vocab,
                            out.as<float>(), split, workspace.get(), error.get(), nullptr);
      error.check("logprob", vocab);
      cuda_support::hand_over_rows(batch, "logprob", out);
      return;
    }
    Tensor& dlogits = batch.out("dlogits");
    cuda::DeviceBuffer dlogprob = vd::input_rows(batch, "dlogprob");
    cuda::DeviceBuffer out(dlogits.bytes());
    out.fill_bytes(0xFF);
    cuda::logprob_backward(dtype, logits.get(), targets.as<std::int32_t>(), dlogprob.as<float>(),
                           slot_list.as<std::int32_t>(), slot_list.as<std::int32_t>(), rows, vocab,
                           out.get(), split, workspace.get(), error.get(), nullptr);
    error.check("logprob", vocab);
    cuda_support::hand_over_rows(batch, "dlogits", out);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override;

 private:
  // What decides a row's split: the fixed-order plan, or the control's piece and merge order.
  static nlohmann::json config_for(const cuda::LogprobSplit& split, cuda::DeviceDType dtype,
                                   std::int64_t vocab, Pass pass) {
    if (split.piece > 0) return {{"piece", split.piece}, {"reverse_merge", split.reverse_merge}};
    const cuda::LogprobFixedPlan plan =
        cuda::logprob_fixed_plan(dtype, vocab, pass == Pass::backward);
    return {{"blocks_per_row", plan.blocks},
            {"block_entries", plan.block_entries},
            {"staged", plan.staged}};
  }

  cuda::LogprobSplit split_for(std::int64_t rows, std::int64_t vocab,
                               const std::string& forced = "") const {
    if (!split_by_rows_) {
      cuda::LogprobSplit fixed;
      fixed.registers_forward = forced == "forward.registers";
      return fixed;
    }
    return cuda::logprob_split_by_rows(rows, vocab, cuda::query_device().sm_count);
  }

  bool split_by_rows_;
};

std::optional<BenchMeasurement> CudaLogprob::benchmark(const CaseSpec& spec,
                                                       const BenchSettings& settings) {
  const std::int64_t rows = spec.rows, vocab = spec.dim("V");
  const std::size_t logits_bytes = static_cast<std::size_t>(rows * vocab) * dtype_size(spec.dtype);
  const bool forward = spec.pass == Pass::forward;
  // Forward reads logits and targets, writes logprob; backward also reads dlogprob and writes
  // dlogits.
  const std::size_t set_bytes = forward ? logits_bytes + static_cast<std::size_t>(rows) * 8
                                        : 2 * logits_bytes + static_cast<std::size_t>(rows) * 8;
  const std::size_t sets = vd::rotation_sets(set_bytes, settings);
  const cuda::LogprobSplit split = split_for(rows, vocab);
  std::vector<std::int32_t> slot_list(static_cast<std::size_t>(rows)),
      target_list(static_cast<std::size_t>(rows));
  std::iota(slot_list.begin(), slot_list.end(), 0);
  for (std::size_t i = 0; i < target_list.size(); ++i)
    target_list[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(vocab));
  cuda::DeviceBuffer slots = vd::upload(slot_list), targets = vd::upload(target_list);
  std::vector<float> ones(static_cast<std::size_t>(rows), 1.0f);
  cuda::DeviceBuffer dlogprob = vd::upload(ones);
  std::vector<cuda::DeviceBuffer> logits, outs;
  for (std::size_t i = 0; i < sets; ++i) {
    logits.push_back(vd::random_input(logits_bytes, spec.dtype, 1 + i));
    outs.emplace_back(forward ? static_cast<std::size_t>(rows) * sizeof(float) : logits_bytes);
  }
  cuda::DeviceBuffer workspace(
      std::max<std::size_t>(16, cuda::logprob_workspace_bytes(rows, vocab, split)));
  vd::ErrorRecord error;
  const cuda::DeviceDType dtype = vd::device_dtype(spec.dtype);
  BenchMeasurement measurement = vd::time_rotated(settings, sets, [&](std::size_t i) {
    if (forward) {
      cuda::logprob_forward(dtype, logits[i].get(), targets.as<std::int32_t>(),
                            slots.as<std::int32_t>(), slots.as<std::int32_t>(), rows, vocab,
                            outs[i].as<float>(), split, workspace.get(), error.get(), nullptr);
    } else {
      cuda::logprob_backward(dtype, logits[i].get(), targets.as<std::int32_t>(),
                             dlogprob.as<float>(), slots.as<std::int32_t>(),
                             slots.as<std::int32_t>(), rows, vocab, outs[i].get(), split,
                             workspace.get(), error.get(), nullptr);
    }
  });
  error.check("logprob benchmark", vocab);
  measurement.bytes_moved = static_cast<double>(set_bytes);
  measurement.config = config_for(split, dtype, vocab, spec.pass);
  measurement.config["rotation_sets"] = sets;
  return measurement;
}

}  // namespace

void register_logprob_cuda(Registry& registry) {
  register_impls<CudaLogprob, bool>(
      registry, "logprob",
      {{ImplInfo::invariant("fixed-order", "cuda",
                            "one block folds a whole row in one read (16-byte loads, fixed lane "
                            "order and butterfly, warps in order); the backward keeps the row in "
                            "shared memory (runs of 64 KiB over a thread-block cluster, merged in "
                            "run order) and writes dlogits from it; targets checked on the device")
            .with_paths(cuda::logprob_paths(false)),
        false},
       {ImplInfo::control("split-vocab-by-rows", "cuda",
                          "control: pieces sized so rows x pieces fills the GPU (more pieces when "
                          "rows are few), merged last to first")
            .with_paths(cuda::logprob_paths(true)),
        true}});
}

}  // namespace bitcheck
