// The CPU's head-parallel attention: cpu-fixed-order on each simulated rank's heads, the ranks run
// one after the other and their column blocks placed side by side (attention_tp.h).
#include <memory>

#include "attention/attention.h"
#include "attention/attention_tp.h"

namespace bitcheck {
namespace {

class HeadParallelCpu : public attention::HeadParallel {
 public:
  using HeadParallel::HeadParallel;
  void run(Batch& batch) override {
    for (int rank = 0; rank < batch.tp; ++rank)
      attention::place_share(run_rank(batch, rank), rank, batch);
  }
};

}  // namespace

void register_attention_tp_cpu(Registry& registry) {
  Impl* inner = registry.find_impl("attention", "cpu-fixed-order");
  registry.add_impl("attention", std::make_unique<HeadParallelCpu>(
                                     *inner, "cpu-tp-heads-fixed-order", inner->paths()));
}

}  // namespace bitcheck
