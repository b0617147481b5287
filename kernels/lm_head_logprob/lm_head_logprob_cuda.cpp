// CUDA impls of lm_head_logprob: the LM head's GEMMs (lm_head/lm_head_gemms.h) into logits stored
// in the case dtype, handed to logprob's fixed-order kernels (logprob/logprob_kernels.h) and back
// through both. The table is the process-wide device copy of the runner's parameter.
#include <algorithm>
#include <memory>
#include <numeric>

#include "common/device_output_cuda.h"
#include "common/runtime.h"
#include "common/vocab_device.h"
#include "core/op.h"
#include "lm_head/lm_head_gemms.h"
#include "lm_head_logprob/lm_head_logprob.h"
#include "logprob/logprob_kernels.h"

namespace bitcheck {
namespace {

namespace vd = vocab_device;
using cuda::DeviceBuffer;
using lm_head::GemmPath;

// The LM head impl on the path, with the logprob kernels after it: their paths are logprob's
// (required there), shown here.
ImplInfo lm_head_logprob_info(GemmPath path) {
  ImplInfo info = lm_head::gemm_info(path);
  info.description +=
      "; logits stored in the case dtype feed the fixed-order logprob kernels (a split of the "
      "vocabulary fixed by V)";
  for (PathDecl decl : cuda::logprob_paths(false)) info.paths.push_back(decl.informative());
  return info;
}

class CudaLmHeadLogprob : public Impl {
 public:
  explicit CudaLmHeadLogprob(GemmPath path)
      : Impl(lm_head_logprob_info(path)), path_(path), gemms_(lm_head::make_gemms(path)) {}

  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    return lm_head::gemm_switch_points(path_, spec, max_rows);
  }
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    return lm_head::gemm_skip_reason(path_, spec);
  }

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const std::int64_t m = batch.slots(), v = spec.dim("V"), hidden = spec.dim("H");
    const cuda::DeviceDType dtype = vd::device_dtype(spec.dtype);
    auto table = vd::shared_parameter(batch, "table");
    std::vector<std::int32_t> slots = vd::real_slot_list(batch);
    const auto rows = static_cast<std::int64_t>(slots.size());
    DeviceBuffer h = vd::upload(batch.in("h")), targets = vd::upload(batch.in("target")),
                 slot_list = vd::upload(slots);
    DeviceBuffer logits(static_cast<std::size_t>(m * v) * dtype_size(spec.dtype));
    gemms_->logits(batch, h.get(), table->get(), logits.get(), m);
    const cuda::LogprobSplit split{};
    DeviceBuffer workspace(
        std::max<std::size_t>(16, cuda::logprob_workspace_bytes(rows, v, split)));
    vd::ErrorRecord error;
    if (spec.pass == Pass::forward) {
      Tensor& logprob = batch.out("logprob");
      DeviceBuffer out(logprob.bytes());
      out.fill_bytes(0xFF);
      cuda::logprob_forward(dtype, logits.get(), targets.as<std::int32_t>(),
                            slot_list.as<std::int32_t>(), slot_list.as<std::int32_t>(), rows, v,
                            out.as<float>(), split, workspace.get(), error.get(), nullptr);
      error.check("lm_head_logprob", v);
      cuda_support::hand_over_rows(batch, "logprob", out);
      return;
    }
    // dlogits of the real rows, packed (row r = slot slots[r]), feed dh and dtable.
    std::vector<std::int32_t> packed(slots.size());
    std::iota(packed.begin(), packed.end(), 0);
    DeviceBuffer packed_list = vd::upload(packed), dlogprob = vd::upload(batch.in("dlogprob"));
    DeviceBuffer dlogits(
        std::max<std::size_t>(16, static_cast<std::size_t>(rows * v) * dtype_size(spec.dtype)));
    cuda::logprob_backward(dtype, logits.get(), targets.as<std::int32_t>(), dlogprob.as<float>(),
                           slot_list.as<std::int32_t>(), packed_list.as<std::int32_t>(), rows, v,
                           dlogits.get(), split, workspace.get(), error.get(), nullptr);
    error.check("lm_head_logprob", v);
    // dh of the real rows packed, then at their slots (left on the device or downloaded).
    const std::size_t dh_row_bytes = static_cast<std::size_t>(hidden) * dtype_size(spec.dtype);
    DeviceBuffer dh_packed(
        std::max<std::size_t>(16, static_cast<std::size_t>(rows) * dh_row_bytes));
    if (rows > 0) gemms_->input_grad(batch, dlogits.get(), dh_packed.get(), rows);
    DeviceBuffer dh = cuda_support::rows_at_slots(dh_packed, slots, m, dh_row_bytes);
    cuda_support::hand_over_rows(batch, "dh", dh);
    if (!batch.reductions_wanted) return;  // no check reads this layout's dtable
    DeviceBuffer& dtable = vd::carried_accumulator(batch, "dtable");
    if (rows > 0) {
      DeviceBuffer h_packed = vd::upload(vd::compact_rows(batch.in("h"), slots));
      gemms_->table_grad_device(batch, dlogits.get(), h_packed.get(), rows, dtable);
    }
    vd::download_after_last(batch, "dtable", dtable);
  }

  // The GEMM dominates; logprob has its own benchmark.
  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    return gemms_->benchmark(spec, settings);
  }

 private:
  GemmPath path_;
  std::unique_ptr<lm_head::Gemms> gemms_;
};

}  // namespace

void register_lm_head_logprob_cuda(Registry& registry) {
  for (GemmPath path :
       {GemmPath::fixed_order, GemmPath::cublaslt_heuristic, GemmPath::split_k_by_rows})
    registry.add_impl("lm_head_logprob", std::make_unique<CudaLmHeadLogprob>(path));
}

}  // namespace bitcheck
