// CPU impls of add_rmsnorm. `cpu-fixed-order` forms h = dtype(x + residual), sums each row's
// squares in index order and reduces dweight over tokens in token order into the fp32 accumulator.
// The controls split a row's sum of squares in two when the batch is small (a row split across
// blocks when rows are few), or size the dweight tree by the padded slot count.
#include <cmath>
#include <memory>

#include "add_rmsnorm/add_rmsnorm.h"
#include "common/token_reduction.h"

namespace bitcheck {
namespace {

constexpr float rms_eps = 1e-6f;
constexpr std::int64_t split_row_below_rows = 4;

class AddRmsnormCpu : public Impl {
 public:
  enum class Kind { fixed_order, split_row_small_batch, dweight_tree_by_tokens };
  explicit AddRmsnormCpu(Kind kind) : kind_(kind) {}

  std::string name() const override {
    switch (kind_) {
      case Kind::fixed_order:
        return "cpu-fixed-order";
      case Kind::split_row_small_batch:
        return "cpu-split-row-small-batch";
      case Kind::dweight_tree_by_tokens:
        return "cpu-dweight-tree-by-tokens";
    }
    return "";
  }
  std::string backend() const override { return "cpu"; }
  bool claims_invariance() const override { return kind_ == Kind::fixed_order; }
  bool expected_to_drift(Pass pass) const override {
    if (kind_ == Kind::dweight_tree_by_tokens) return pass == Pass::backward;
    return kind_ == Kind::split_row_small_batch;
  }
  std::string description() const override {
    switch (kind_) {
      case Kind::fixed_order:
        return "h = dtype(x + residual); row sum of squares of h in index order; dweight summed "
               "over tokens in token order";
      case Kind::split_row_small_batch:
        return "control: with fewer than 4 rows, each row's sum of squares is split in two halves "
               "whose partials pass through an io-dtype workspace (a row split across blocks when "
               "rows are few, as in fused add-RMSNorm kernels that switch launch shape by token "
               "count)";
      case Kind::dweight_tree_by_tokens:
        return "control: dweight reduced with a tree sized by the padded token count";
    }
    return "";
  }
  bool supports(Pass) const override { return true; }
  // The split control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (kind_ != Kind::split_row_small_batch) return {};
    return row_threshold_switch(split_row_below_rows, "rows.split", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const std::int64_t width = batch.spec->dim("H");
    const DType dtype = batch.spec->dtype;
    const Tensor& x = batch.in("x");
    const Tensor& residual = batch.in("residual");
    const Tensor& weight = batch.in("weight");
    const bool split = kind_ == Kind::split_row_small_batch &&
                       batch.invocation->valid_rows() < split_row_below_rows;
    auto h = [&](std::int64_t index) {
      return round_to(dtype, x.get(index) + residual.get(index));
    };
    auto inverse_rms = [&](std::int64_t slot) {
      auto squares = [&](std::int64_t first, std::int64_t last) {
        float sum = 0.0f;
        for (std::int64_t i = first; i < last; ++i) {
          float v = h(slot * width + i);
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
      Tensor& h_out = batch.out("h");
      for (std::int64_t s : real_slots(batch)) {
        float r = inverse_rms(s);
        for (std::int64_t i = 0; i < width; ++i) {
          float v = h(s * width + i);
          h_out.set(s * width + i, v);
          y.set(s * width + i, v * r * weight.get(i));
        }
      }
      return;
    }
    const Tensor& dy = batch.in("dy");
    const Tensor& dh = batch.in("dh");
    Tensor& dx = batch.out("dx");
    Tensor& dresidual = batch.out("dresidual");
    Tensor& dweight = batch.out("dweight");
    for (std::int64_t s : real_slots(batch)) {
      float r = inverse_rms(s);
      float projection = 0.0f;  // mean over the row of dy * weight * xhat, in index order
      for (std::int64_t i = 0; i < width; ++i)
        projection += dy.get(s * width + i) * weight.get(i) * (h(s * width + i) * r);
      projection /= static_cast<float>(width);
      for (std::int64_t i = 0; i < width; ++i) {
        float xhat = h(s * width + i) * r;
        float value =
            dh.get(s * width + i) + (dy.get(s * width + i) * weight.get(i) - xhat * projection) * r;
        dx.set(s * width + i, value);
        dresidual.set(s * width + i, value);
      }
    }
    std::vector<float> accumulator(static_cast<std::size_t>(width));
    for (std::int64_t i = 0; i < width; ++i)
      accumulator[static_cast<std::size_t>(i)] = dweight.get(i);
    auto add_token = [&](std::int64_t s, std::vector<float>& sum) {
      float r = inverse_rms(s);
      for (std::int64_t i = 0; i < width; ++i)
        sum[static_cast<std::size_t>(i)] += dy.get(s * width + i) * (h(s * width + i) * r);
    };
    if (kind_ == Kind::dweight_tree_by_tokens) {
      tree_reduce_by_slot_count(batch, width, accumulator, add_token);
    } else {
      for (std::int64_t s : real_slots(batch)) add_token(s, accumulator);
    }
    for (std::int64_t i = 0; i < width; ++i)
      dweight.set(i, accumulator[static_cast<std::size_t>(i)]);
  }

 private:
  Kind kind_;
};

}  // namespace

void register_add_rmsnorm_cpu(Registry& registry) {
  registry.add_impl("add_rmsnorm",
                    std::make_unique<AddRmsnormCpu>(AddRmsnormCpu::Kind::fixed_order));
  registry.add_impl("add_rmsnorm",
                    std::make_unique<AddRmsnormCpu>(AddRmsnormCpu::Kind::split_row_small_batch));
  registry.add_impl("add_rmsnorm",
                    std::make_unique<AddRmsnormCpu>(AddRmsnormCpu::Kind::dweight_tree_by_tokens));
}

}  // namespace bitcheck
