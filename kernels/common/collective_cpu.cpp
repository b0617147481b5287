// CPU impls of the collectives on simulated ranks: each rank's contribution is the row's slice
// [r * H, (r + 1) * H), summed in the order of a transport (common/rank_sum.h) over the message of
// the invocation (slots x H elements, pad slots included, as a real collective sends them). A ring
// reduce-scatter reduces each part from the rank after its owner, the ring all-reduce's order.
#include <memory>

#include "common/collective.h"
#include "common/rank_sum.h"

namespace bitcheck {
namespace {

struct SimulatedKind {
  const char* name;
  RankSum sum;
  bool claims_invariance;
  int drifts_from_tp;
  const char* description;
};

constexpr SimulatedKind kinds[] = {
    {"cpu-fixed-order", RankSum::fixed_tree, true, 1,
     "the ranks' contributions summed in one balanced fp32 tree in rank order, rounded once: the "
     "order depends on neither the message size nor the batch"},
    {"cpu-rank-chain", RankSum::rank_chain, true, 1,
     "a chain in rank order rounded after each addition (NCCL's tree in one node, algorithm, "
     "protocol and channels pinned): fixed whatever the message size"},
    {"cpu-ring", RankSum::ring, false, 3,
     "control: NCCL's ring, each element's part of the message reduced from the rank after the "
     "part's owner: the order follows the message size, so it moves with the batch at 3 or more "
     "ranks"},
    {"cpu-rotating-chain", RankSum::rotating_chain, false, 3,
     "control: a chain from a rank that a hash of the message size picks, so it moves with the "
     "batch (at 3 or more ranks)"},
};

ImplInfo info_of(const SimulatedKind& kind) {
  TensorParallelism parallelism;
  parallelism.max_tp = max_tensor_parallel;
  parallelism.drifts_from_tp = kind.drifts_from_tp;
  ImplInfo info = kind.claims_invariance ? ImplInfo::invariant(kind.name, "cpu", kind.description)
                                         : ImplInfo::control(kind.name, "cpu", kind.description);
  info.only_passes({Pass::forward}).on_ranks(parallelism);
  return info;
}

class SimulatedCollective : public Impl {
 public:
  explicit SimulatedCollective(const SimulatedKind& kind) : Impl(info_of(kind)), kind_(kind) {}

  void run(Batch& batch) override {
    const std::int64_t h = batch.spec->dim("H");
    const Tensor& x = batch.in("x");
    Tensor& y = batch.out("y");
    const std::int64_t message = batch.slots() * h;
    std::vector<float> values(static_cast<std::size_t>(batch.tp));
    for (std::int64_t slot = 0; slot < batch.slots(); ++slot) {
      for (std::int64_t c = 0; c < h; ++c) {
        for (int rank = 0; rank < batch.tp; ++rank)
          values[static_cast<std::size_t>(rank)] = x.get((slot * batch.tp + rank) * h + c);
        y.set(slot * h + c, sum_ranks(kind_.sum, values, batch.spec->dtype, slot * h + c, message));
      }
    }
  }

 private:
  const SimulatedKind& kind_;
};

}  // namespace

void register_collective_cpu(Registry& registry, Collective collective) {
  for (const SimulatedKind& kind : kinds)
    registry.add_impl(collective_name(collective), std::make_unique<SimulatedCollective>(kind));
}

}  // namespace bitcheck
