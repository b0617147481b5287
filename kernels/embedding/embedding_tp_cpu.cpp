// CPU impls of embedding with the vocabulary split over simulated ranks (tensor parallelism): rank
// r holds table rows [r * V / tp, (r + 1) * V / tp). Forward: each rank looks up the ids it owns
// (the others' rows masked) and the ranks' lookups are combined; backward: each rank accumulates
// dtable for its own rows (rank-local, no sum across ranks). A masked sum x + 0 + 0 is exact in
// any order but for the sign of zero (-0 + +0 = +0) and a signaling NaN (an addition quiets it),
// so the two kinds differ only there:
//   fixed-order  no sum: the masked lookups are gathered and every element is taken from the rank
//                that owns its id, so a -0 (or a NaN's payload) reaches the output at every tp;
//   rank-chain   the non-owners' rows masked with +0 and the ranks' values added in rank order in
//                the dtype (NCCL's sum over a masked fill, as Megatron does): at tp > 1 a -0 in
//                the table comes out +0 (and a signaling NaN quiet), a difference across TP
//                sizes that is reported.
// No control drifts by construction here: every order of an exact sum gives the same bits.
#include <memory>

#include "common/rank_sum.h"
#include "common/split_sum.h"
#include "common/token_reduction.h"
#include "embedding/embedding.h"

namespace bitcheck {
namespace {

struct EmbeddingTpKind {
  const char* name;
  bool sums_masked_lookups;  // false: the owner's value is taken
  TensorParallelism::AcrossTp across_tp;
  const char* description;
};

constexpr EmbeddingTpKind kinds[] = {
    {"cpu-tp-vocab-fixed-order", false, TensorParallelism::AcrossTp::claimed,
     "V split over ranks: each rank looks up the ids it owns; no sum, every element is taken from "
     "the rank that owns its id (a -0 and a NaN's payload reach the output at every tp); dtable "
     "rank-local in (id, token order)"},
    {"cpu-tp-vocab-rank-chain", true, TensorParallelism::AcrossTp::observed,
     "V split over ranks: the non-owners' rows masked with +0 and the ranks' lookups added in rank "
     "order in the dtype, as NCCL's sum over a masked fill: exact but for -0, which comes out +0 "
     "at tp > 1 (and a signaling NaN, quieted); dtable rank-local in (id, token order)"},
};

ImplInfo info_of(const EmbeddingTpKind& kind) {
  return ImplInfo::invariant(kind.name, "cpu", kind.description)
      .on_ranks(split_parallelism(kind.across_tp, 1, {"V"}));
}

class EmbeddingTpCpu : public Impl {
 public:
  explicit EmbeddingTpCpu(const EmbeddingTpKind& kind) : Impl(info_of(kind)), kind_(kind) {}

  void run(Batch& batch) override {
    const std::int64_t vocab = batch.spec->dim("V"), share = vocab / batch.tp;
    if (batch.spec->pass == Pass::backward) {
      for (int rank = 0; rank < batch.tp; ++rank) {
        embedding_table_grad_in_id_order(batch, rank * share, (rank + 1) * share,
                                         batch.out("dtable"));
      }
      return;
    }
    const std::int64_t hidden = batch.spec->dim("H");
    for (std::int64_t s : real_slots(batch)) {
      const std::int32_t id = checked_token_id(batch, s);
      for (std::int64_t c = 0; c < hidden; ++c)
        combine_lookups(batch, id / share, id * hidden + c, s * hidden + c);
    }
  }

 private:
  // Element `element` of the output from the ranks' masked lookups of table element `source`,
  // which rank `owner` holds.
  void combine_lookups(Batch& batch, std::int64_t owner, std::int64_t source,
                       std::int64_t element) const {
    const Tensor& table = batch.in("table");
    Tensor& out = batch.out("out");
    if (!kind_.sums_masked_lookups) {
      out.set_bits(element, table.bits(source));
      return;
    }
    std::vector<float> lookups(static_cast<std::size_t>(batch.tp), 0.0f);
    lookups[static_cast<std::size_t>(owner)] = table.get(source);
    const std::int64_t message = batch.slots() * out.row_size();
    out.set(element, sum_ranks(RankSum::rank_chain, lookups, batch.spec->dtype, element, message));
  }

  const EmbeddingTpKind& kind_;
};

}  // namespace

void register_embedding_tp_cpu(Registry& registry) {
  for (const EmbeddingTpKind& kind : kinds)
    registry.add_impl("embedding", std::make_unique<EmbeddingTpCpu>(kind));
}

}  // namespace bitcheck
