// CPU impls of rmsnorm. `cpu-fixed-order` sums each row's squares in index order and reduces
// dweight over tokens in token order into the fp32 accumulator. The controls split a row's sum of
// squares across two "blocks" when the batch is small, or size the dweight tree by slot count.
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
  enum class Kind { fixed_order, split_row_small_batch, dweight_tree_by_tokens };
  explicit RmsnormCpu(Kind kind) : kind_(kind) {}

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
        return "row sum of squares in index order; dweight summed over tokens in token order";
      case Kind::split_row_small_batch:
        return "control: with fewer than 4 rows, each row's sum of squares is split in two halves "
               "whose partials pass through an io-dtype workspace (a row split across blocks when "
               "rows are few)";
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
    const std::int64_t h = batch.spec->dim("H");
    const Tensor& x = batch.in("x");
    const Tensor& weight = batch.in("weight");
    const bool split = kind_ == Kind::split_row_small_batch &&
                       batch.invocation->valid_rows() < split_row_below_rows;
    auto inverse_rms = [&](std::int64_t slot) {
      auto squares = [&](std::int64_t first, std::int64_t last) {
        float sum = 0.0f;
        for (std::int64_t i = first; i < last; ++i) {
          float v = x.get(slot * h + i);
          sum += v * v;
        }
        return sum;
      };
      // Split: each half's partial passes through a workspace in the io dtype (rounded to it).
      const DType dtype = batch.spec->dtype;
      float sum = split ? round_to(dtype, squares(0, h / 2)) + round_to(dtype, squares(h / 2, h))
                        : squares(0, h);
      return 1.0f / std::sqrt(sum / static_cast<float>(h) + rms_eps);
    };
    if (batch.spec->pass == Pass::forward) {
      Tensor& y = batch.out("y");
      for (std::int64_t s : real_slots(batch)) {
        float r = inverse_rms(s);
        for (std::int64_t i = 0; i < h; ++i) y.set(s * h + i, x.get(s * h + i) * r * weight.get(i));
      }
      return;
    }
    const Tensor& dy = batch.in("dy");
    Tensor& dx = batch.out("dx");
    Tensor& dweight = batch.out("dweight");
    std::vector<float> accumulator(static_cast<std::size_t>(h));
    for (std::int64_t i = 0; i < h; ++i) accumulator[static_cast<std::size_t>(i)] = dweight.get(i);
    for (std::int64_t s : real_slots(batch)) {
      float r = inverse_rms(s);
      float projection = 0.0f;  // mean over the row of dy * weight * xhat, in index order
      for (std::int64_t i = 0; i < h; ++i) {
        projection += dy.get(s * h + i) * weight.get(i) * (x.get(s * h + i) * r);
      }
      projection /= static_cast<float>(h);
      for (std::int64_t i = 0; i < h; ++i) {
        float xhat = x.get(s * h + i) * r;
        dx.set(s * h + i, (dy.get(s * h + i) * weight.get(i) - xhat * projection) * r);
      }
    }
    auto add_token = [&](std::int64_t s, std::vector<float>& sum) {
      float r = inverse_rms(s);
      for (std::int64_t i = 0; i < h; ++i)
        sum[static_cast<std::size_t>(i)] += dy.get(s * h + i) * (x.get(s * h + i) * r);
    };
    if (kind_ == Kind::dweight_tree_by_tokens) {
      tree_reduce_by_slot_count(batch, h, accumulator, add_token);
    } else {
      for (std::int64_t s : real_slots(batch)) add_token(s, accumulator);
    }
    for (std::int64_t i = 0; i < h; ++i) dweight.set(i, accumulator[static_cast<std::size_t>(i)]);
  }

 private:
  Kind kind_;
};

}  // namespace

void register_rmsnorm_cpu(Registry& registry) {
  registry.add_impl("rmsnorm", std::make_unique<RmsnormCpu>(RmsnormCpu::Kind::fixed_order));
  registry.add_impl("rmsnorm",
                    std::make_unique<RmsnormCpu>(RmsnormCpu::Kind::split_row_small_batch));
  registry.add_impl("rmsnorm",
                    std::make_unique<RmsnormCpu>(RmsnormCpu::Kind::dweight_tree_by_tokens));
}

}  // namespace bitcheck
