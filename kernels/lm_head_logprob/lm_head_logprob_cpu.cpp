// CPU impls of lm_head_logprob: the fixed-order LM head (logits rounded to the case dtype, as they
// are stored between the kernels) handing off to the fixed-chunk log-softmax, and back through
// the same two paths. The control uses the LM head's K-split-by-rows path.
#include <memory>

#include "common/vocab_cpu.h"
#include "lm_head_logprob/lm_head_logprob.h"

namespace bitcheck {
namespace {

class LmHeadLogprobCpu : public Impl {
 public:
  LmHeadLogprobCpu(ImplInfo info, bool split_k_by_rows)
      : Impl(std::move(info)), split_k_by_rows_(split_k_by_rows) {}
  // The control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (!split_k_by_rows_) return {};
    return row_threshold_switch(split_below_rows, "rows.split-k", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const bool split = split_k_by_rows_ && batch.invocation->valid_rows() < split_below_rows;
    const Tensor& table = batch.in("table");
    const Tensor& h = batch.in("h");
    Tensor logits(batch.spec->dtype, {batch.slots(), table.shape()[0]});
    logits.fill_nan();
    lm_head_forward(batch, h, table, logits, split);
    if (batch.spec->pass == Pass::forward) {
      logprob_rows(batch, logits, 0, &batch.out("logprob"), nullptr);
      return;
    }
    Tensor dlogits(batch.spec->dtype, logits.shape());
    dlogits.fill_nan();
    logprob_rows(batch, logits, 0, nullptr, &dlogits);
    lm_head_input_grad(batch, dlogits, table, batch.out("dh"), split);
    lm_head_table_grad(batch, dlogits, h, batch.out("dtable"));
  }

 private:
  bool split_k_by_rows_;
};

}  // namespace

void register_lm_head_logprob_cpu(Registry& registry) {
  register_impls<LmHeadLogprobCpu, bool>(
      registry, "lm_head_logprob",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "lm_head cpu-fixed-order into logits in the case dtype, then logprob "
                            "cpu-fixed-order (4096-entry chunks in order); backward through both"),
        false},
       {ImplInfo::control("cpu-split-k-by-rows", "cpu",
                          "control: the LM head (logits and dh) splits its sums into 4 partials "
                          "reduced in the output dtype when the batch holds fewer than 4 rows"),
        true}});
}

}  // namespace bitcheck
