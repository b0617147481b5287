// CPU impls of rmsnorm, also run on h = dtype(x + residual) for the fused residual add.
// `cpu-fixed-order` sums each row's squares in index order and reduces dweight over tokens in token
// order into the fp32 accumulator. The controls split a row's sum of squares across two "blocks"
// when the batch is small, or size the dweight tree by slot count.
#include <cmath>
#include <memory>

#include "common/token_reduction.h"
#include "rmsnorm/rmsnorm.h"

namespace bitcheck {
namespace {

constexpr float rms_eps = 1e-6f;
// Below this many rows the split control reduces each row in two halves, the way a kernel splits a
// row across blocks when there are too few rows to fill the GPU.
constexpr std::int64_t split_row_below_rows = 4;

class RmsnormCpu : public Impl {
 public:
  RmsnormCpu(ImplInfo info, RmsnormInput input, RmsnormCpuVariant variant)
      : Impl(std::move(info)), input_(input), variant_(variant) {}
  // The split control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (variant_ != RmsnormCpuVariant::split_row_small_batch) return {};
    return row_threshold_switch(split_row_below_rows, "rows.split", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const std::int64_t width = batch.spec->dim("H");
    const DType dtype = batch.spec->dtype;
    const Tensor& x = batch.in("x");
    const Tensor* residual =
        input_ == RmsnormInput::x_plus_residual ? &batch.in("residual") : nullptr;
    const Tensor& weight = batch.in("weight");
    const bool split = variant_ == RmsnormCpuVariant::split_row_small_batch &&
                       batch.invocation->valid_rows() < split_row_below_rows;
    // The normalized row's element: x, or h = dtype(x + residual) as the residual stream is stored.
    auto value = [&](std::int64_t index) {
      return residual ? round_to(dtype, x.get(index) + residual->get(index)) : x.get(index);
    };
    auto inverse_rms = [&](std::int64_t slot) {
      auto squares = [&](std::int64_t first, std::int64_t last) {
        float sum = 0.0f;
        for (std::int64_t i = first; i < last; ++i) {
          float v = value(slot * width + i);
          sum += v * v;
        }
        return sum;
      };
      // Split: each half's partial passes through a workspace in the io dtype (rounded to it).
      float sum = split ? round_to(dtype, squares(0, width / 2)) +
                              round_to(dtype, squares(width / 2, width))
                        : squares(0, width);
      return 1.0f / std::sqrt(sum / static_cast<float>(width) + rms_eps);
    };
    if (batch.spec->pass == Pass::forward) {
      Tensor& y = batch.out("y");
      Tensor* h_out = residual ? &batch.out("h") : nullptr;
      for (std::int64_t s : real_slots(batch)) {
        float r = inverse_rms(s);
        for (std::int64_t i = 0; i < width; ++i) {
          float v = value(s * width + i);
          if (h_out) h_out->set(s * width + i, v);
          y.set(s * width + i, v * r * weight.get(i));
        }
      }
      return;
    }
    const Tensor& dy = batch.in("dy");
    const Tensor* dh = residual ? &batch.in("dh") : nullptr;
    Tensor& dx = batch.out("dx");
    Tensor* dresidual = residual ? &batch.out("dresidual") : nullptr;
    for (std::int64_t s : real_slots(batch)) {
      float r = inverse_rms(s);
      float projection = 0.0f;  // mean over the row of dy * weight * xhat, in index order
      for (std::int64_t i = 0; i < width; ++i)
        projection += dy.get(s * width + i) * weight.get(i) * (value(s * width + i) * r);
      projection /= static_cast<float>(width);
      for (std::int64_t i = 0; i < width; ++i) {
        float xhat = value(s * width + i) * r;
        float gradient = (dy.get(s * width + i) * weight.get(i) - xhat * projection) * r;
        if (dh) gradient = dh->get(s * width + i) + gradient;
        dx.set(s * width + i, gradient);
        if (dresidual) dresidual->set(s * width + i, gradient);
      }
    }
    accumulate_dweight(batch, dy, width, value, inverse_rms);
  }

 private:
  // dweight[i] += dy[t, i] * xhat[t, i] over the real tokens t: in token order, or the control's
  // tree sized by the slot count.
  template <typename Value, typename InverseRms>
  void accumulate_dweight(Batch& batch, const Tensor& dy, std::int64_t width, Value value,
                          InverseRms inverse_rms) const {
    Tensor& dweight = batch.out("dweight");
    std::vector<float> accumulator(static_cast<std::size_t>(width));
    for (std::int64_t i = 0; i < width; ++i)
      accumulator[static_cast<std::size_t>(i)] = dweight.get(i);
    auto add_token = [&](std::int64_t s, std::vector<float>& sum) {
      float r = inverse_rms(s);
      for (std::int64_t i = 0; i < width; ++i)
        sum[static_cast<std::size_t>(i)] += dy.get(s * width + i) * (value(s * width + i) * r);
    };
    if (variant_ == RmsnormCpuVariant::dweight_tree_by_tokens) {
      tree_reduce_by_slot_count(batch, width, accumulator, add_token);
    } else {
      for (std::int64_t s : real_slots(batch)) add_token(s, accumulator);
    }
    for (std::int64_t i = 0; i < width; ++i)
      dweight.set(i, accumulator[static_cast<std::size_t>(i)]);
  }

  RmsnormInput input_;
  RmsnormCpuVariant variant_;
};

}  // namespace

void register_rmsnorm_cpu_impls(Registry& registry, const std::string& op, RmsnormInput input) {
  // With the fused add, the descriptions name the row h and the kernels the split control models.
  const bool fused = input == RmsnormInput::x_plus_residual;
  const std::string row_sum =
      fused ? "h = dtype(x + residual); row sum of squares of h" : "row sum of squares";
  const std::string modelled =
      fused ? ", as in fused add-RMSNorm kernels that switch launch shape by token count" : "";
  const std::pair<ImplInfo, RmsnormCpuVariant> impls[] = {
      {ImplInfo::invariant("cpu-fixed-order", "cpu",
                           row_sum + " in index order; dweight summed over tokens in token order"),
       RmsnormCpuVariant::fixed_order},
      {ImplInfo::control("cpu-split-row-small-batch", "cpu",
                         "control: with fewer than 4 rows, each row's sum of squares is split in "
                         "two halves whose partials pass through an io-dtype workspace (a row "
                         "split across blocks when rows are few" +
                             modelled + ")"),
       RmsnormCpuVariant::split_row_small_batch},
      {ImplInfo::control("cpu-dweight-tree-by-tokens", "cpu",
                         "control: dweight reduced with a tree sized by the padded token count")
           .drifting_in({Pass::backward}),
       RmsnormCpuVariant::dweight_tree_by_tokens}};
  for (const auto& [info, variant] : impls)
    registry.add_impl(op, std::make_unique<RmsnormCpu>(info, input, variant));
}

void register_rmsnorm_cpu(Registry& registry) {
  register_rmsnorm_cpu_impls(registry, "rmsnorm", RmsnormInput::x);
}

}  // namespace bitcheck
