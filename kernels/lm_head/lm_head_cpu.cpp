// CPU impls of lm_head. `cpu-fixed-order` sums each logit over the hidden dimension in index order
// (dh over the vocabulary in index order, dtable over tokens in token order). The control splits
// those sums into 4 partials reduced in the output dtype when the batch holds fewer than 4 rows.
// Whether the table is tied (the embedding's own tensor) or a copy changes nothing: only values
// are read.
#include <memory>

#include "common/vocab_cpu.h"
#include "lm_head/lm_head.h"

namespace bitcheck {
namespace {

class LmHeadCpu : public Impl {
 public:
  LmHeadCpu(ImplInfo info, bool split_k_by_rows)
      : Impl(std::move(info)), split_k_by_rows_(split_k_by_rows) {}
  // The control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (!split_k_by_rows_) return {};
    return row_threshold_switch(split_below_rows, "rows.split-k", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const bool split = split_k_by_rows_ && batch.invocation->valid_rows() < split_below_rows;
    const Tensor& table = batch.in("table");
    if (batch.spec->pass == Pass::forward) {
      lm_head_forward(batch, batch.in("h"), table, batch.out("logits"), split);
      return;
    }
    lm_head_input_grad(batch, batch.in("dlogits"), table, batch.out("dh"), split);
    lm_head_table_grad(batch, batch.in("dlogits"), batch.in("h"), batch.out("dtable"));
  }

 private:
  bool split_k_by_rows_;
};

}  // namespace

void register_lm_head_cpu(Registry& registry) {
  register_impls<LmHeadCpu, bool>(
      registry, "lm_head",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "logits summed over H in index order, dh over V in index order, dtable "
                            "over tokens in token order"),
        false},
       {ImplInfo::control("cpu-split-k-by-rows", "cpu",
                          "control: with fewer than 4 rows the H (and, for dh, V) sums split into "
                          "4 partials reduced in the output dtype, like a heuristic choosing "
                          "split-K for small M"),
        true}});
}

}  // namespace bitcheck
