// CPU impls of matmul. `cpu-fixed-order` sums K (and tokens, for dW) strictly in index order, one
// row at a time: nothing about the batch can change a row's arithmetic. The controls reproduce
// split-K chosen from the batch size and a dW tree sized by the padded token count.
#include <memory>
#include <vector>

#include "common/token_reduction.h"
#include "matmul/matmul.h"

namespace bitcheck {
namespace {

// Rows of the batch below which the K-split control splits the K sum into 4 partials, modelling a
// library heuristic that picks split-K for small M to fill the GPU and reduces the partials in the
// output dtype.
constexpr std::int64_t split_k_below_rows = 4;
constexpr std::int64_t split_k_parts = 4;

// Operands are widened to fp32 once per call (exact), so the loop reads floats; the products and
// the sum are the same fp32 operations in the same order as on the stored values.
float dot_in_order(const std::vector<float>& a, std::int64_t a_offset, std::int64_t a_stride,
                   const std::vector<float>& b, std::int64_t b_offset, std::int64_t b_stride,
                   std::int64_t first, std::int64_t last) {
  float sum = 0.0f;
  for (std::int64_t i = first; i < last; ++i) {
    sum += a[static_cast<std::size_t>(a_offset + i * a_stride)] *
           b[static_cast<std::size_t>(b_offset + i * b_stride)];
  }
  return sum;
}

class MatmulCpu : public Impl {
 public:
  enum class Kind { fixed_order, split_k_by_rows, dw_tree_by_tokens };
  MatmulCpu(ImplInfo info, Kind kind) : Impl(std::move(info)), kind_(kind) {}
  // The split-K control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (kind_ != Kind::split_k_by_rows) return {};
    return row_threshold_switch(split_k_below_rows, "rows.split-k", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    const std::vector<float> w = batch.in("w").to_floats();
    const bool split =
        kind_ == Kind::split_k_by_rows && batch.invocation->valid_rows() < split_k_below_rows;
    const DType dtype = batch.in("w").dtype();
    auto dot = [&](const std::vector<float>& a, std::int64_t a_offset, std::int64_t a_stride,
                   std::int64_t b_offset, std::int64_t b_stride, std::int64_t length) {
      if (!split) return dot_in_order(a, a_offset, a_stride, w, b_offset, b_stride, 0, length);
      // Partials reduced in the output dtype, as cuBLASLt's OUTPUT_TYPE split-K reduction does.
      float total = 0.0f;
      std::int64_t part = (length + split_k_parts - 1) / split_k_parts;
      for (std::int64_t first = 0; first < length; first += part) {
        float partial = dot_in_order(a, a_offset, a_stride, w, b_offset, b_stride, first,
                                     std::min(length, first + part));
        total = round_to(dtype, total + round_to(dtype, partial));
      }
      return total;
    };
    if (batch.spec->pass == Pass::forward) {
      const std::vector<float> x = batch.in("x").to_floats();
      Tensor& y = batch.out("y");
      for (std::int64_t s : real_slots(batch)) {
        for (std::int64_t j = 0; j < n; ++j) y.set(s * n + j, dot(x, s * k, 1, j * k, 1, k));
      }
      return;
    }
    const std::vector<float> x = batch.in("x").to_floats();
    const std::vector<float> dy = batch.in("dy").to_floats();
    Tensor& dx = batch.out("dx");
    for (std::int64_t s : real_slots(batch)) {
      for (std::int64_t c = 0; c < k; ++c) dx.set(s * k + c, dot(dy, s * n, 1, c, k, n));
    }
    accumulate_dw(batch, x, dy, n, k);
  }

 private:
  void accumulate_dw(Batch& batch, const std::vector<float>& x, const std::vector<float>& dy,
                     std::int64_t n, std::int64_t k) {
    Tensor& dw = batch.out("dw");
    std::vector<float> accumulator(static_cast<std::size_t>(n * k));
    for (std::int64_t i = 0; i < n * k; ++i) accumulator[static_cast<std::size_t>(i)] = dw.get(i);
    auto add_token = [&](std::int64_t s, std::vector<float>& sum) {
      for (std::int64_t j = 0; j < n; ++j) {
        float g = dy[static_cast<std::size_t>(s * n + j)];
        for (std::int64_t c = 0; c < k; ++c)
          sum[static_cast<std::size_t>(j * k + c)] += g * x[static_cast<std::size_t>(s * k + c)];
      }
    };
    if (kind_ == Kind::dw_tree_by_tokens) {
      tree_reduce_by_slot_count(batch, n * k, accumulator, add_token);
    } else {
      for (std::int64_t s : real_slots(batch))
        add_token(s, accumulator);  // token order, carried in
    }
    for (std::int64_t i = 0; i < n * k; ++i) dw.set(i, accumulator[static_cast<std::size_t>(i)]);
  }

  Kind kind_;
};

}  // namespace

void register_matmul_cpu(Registry& registry) {
  using Kind = MatmulCpu::Kind;
  register_impls<MatmulCpu, Kind>(
      registry, "matmul",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "K summed in index order per row; dW summed over tokens in token "
                            "order into the fp32 accumulator"),
        Kind::fixed_order},
       {ImplInfo::control("cpu-split-k-by-rows", "cpu",
                          "control: with fewer than 4 rows, splits the K sum into 4 partials "
                          "reduced in the output dtype, like a library heuristic choosing split-K "
                          "(OUTPUT_TYPE reduction) for small M"),
        Kind::split_k_by_rows},
       {ImplInfo::control("cpu-dw-tree-by-tokens", "cpu",
                          "control: dW reduced with a tree whose leaves hold ceil(slots/4) tokens, "
                          "so padding and micro-batching reshape the sum")
            .drifting_in({Pass::backward}),
        Kind::dw_tree_by_tokens}});
}

}  // namespace bitcheck
