// CPU impls of logprob. `cpu-fixed-order` reduces each row's log-sum-exp in chunks of a fixed 4096
// vocabulary entries (index order inside a chunk), merged in chunk order: the split depends on V
// only. The control splits the row into 4 parts when the batch holds fewer than 4 rows and merges
// them last to first, like a kernel that adds vocabulary splits to fill the GPU when rows are few.
#include <cmath>
#include <memory>

#include "common/token_reduction.h"
#include "common/vocab_cpu.h"
#include "common/vocab_ops.h"
#include "logprob/logprob.h"

namespace bitcheck {

void logprob_rows(const Batch& batch, const Tensor& logits, std::int64_t parts, Tensor* logprob,
                  Tensor* dlogits) {
  const std::int64_t vocab = logits.row_size();
  const Tensor& targets = batch.in("target");
  for (std::int64_t s : real_slots(batch)) {
    const std::int64_t target = checked_target(targets, s, vocab, "logprob");
    const std::vector<float> x = row_values(logits, s);
    const float lse = log_sum_exp(x.data(), vocab, parts);
    if (logprob) logprob->set(s, x[static_cast<std::size_t>(target)] - lse);
    if (!dlogits) continue;
    const float upstream = batch.in("dlogprob").get(s);
    for (std::int64_t v = 0; v < vocab; ++v) {
      const float onehot = v == target ? 1.0f : 0.0f;
      dlogits->set(s * vocab + v,
                   upstream * (onehot - std::exp(x[static_cast<std::size_t>(v)] - lse)));
    }
  }
}

namespace {

class LogprobCpu : public Impl {
 public:
  LogprobCpu(ImplInfo info, bool split_by_rows)
      : Impl(std::move(info)), split_by_rows_(split_by_rows) {}
  // The control's path changes where the split stops: a batch of that many rows drifts.
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t max_rows) const override {
    if (!split_by_rows_) return {};
    return row_threshold_switch(split_below_rows, "rows.split-vocab", "rows.whole", max_rows);
  }

  void run(Batch& batch) override {
    const std::int64_t parts =
        split_by_rows_ && batch.invocation->valid_rows() < split_below_rows ? split_parts : 0;
    if (batch.spec->pass == Pass::forward) {
      logprob_rows(batch, batch.in("logits"), parts, &batch.out("logprob"), nullptr);
    } else {
      logprob_rows(batch, batch.in("logits"), parts, nullptr, &batch.out("dlogits"));
    }
  }

 private:
  bool split_by_rows_;
};

}  // namespace

void register_logprob_cpu(Registry& registry) {
  register_impls<LogprobCpu, bool>(
      registry, "logprob",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "log-sum-exp in fixed chunks of 4096 vocabulary entries (index order "
                            "inside), merged in chunk order"),
        false},
       {ImplInfo::control("cpu-split-vocab-by-rows", "cpu",
                          "control: with fewer than 4 rows the vocabulary is split in 4 parts "
                          "merged last to first (a split count chosen from the batch size)"),
        true}});
}

}  // namespace bitcheck
