// Head-parallel attention's ranks: a rank's case and batch (its column block of every row tensor),
// the inner impl run on it, and the block put back in place.
#include "attention/attention_tp.h"

#include "common/split_sum.h"

namespace bitcheck::attention {
namespace {

// Columns [rank * width / tp, (rank + 1) * width / tp) of every row of `tensor`, bits copied.
Tensor column_block(const Tensor& tensor, int rank, int tp) {
  const std::int64_t rows = tensor.rows(), width = tensor.row_size(), block = width / tp;
  Tensor share(tensor.dtype(), {rows, block});
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < block; ++c)
      share.set_bits(r * block + c, tensor.bits(r * width + rank * block + c));
  }
  return share;
}

// The ranks' layout states, kept in the layout state of the whole batch.
struct RankStates {
  std::vector<std::shared_ptr<void>> ranks;
  CaseSpec spec;  // the ranks' case, which their batches point to
};

}  // namespace

CaseSpec rank_spec(const CaseSpec& spec, int tp) {
  CaseSpec share = spec;
  share.dims["H"] = spec.dim("H") / tp;
  share.dims["KVH"] = spec.dim("KVH") / tp;
  share.tp = 1;
  return share;
}

ImplInfo head_parallel_info(const Impl& inner, std::string name, std::vector<PathDecl> paths) {
  ImplInfo info = ImplInfo::invariant(
      std::move(name), inner.backend(),
      "heads and KV heads split over ranks, each rank running " + inner.name() +
          " on its heads (no reduction across ranks: the same bits at every tp), the outputs "
          "gathered: " +
          inner.description());
  info.only_passes(inner.info().passes)
      .with_dtypes(inner.info().dtypes)
      .with_paths(std::move(paths))
      .on_ranks(split_parallelism(TensorParallelism::AcrossTp::claimed, 1, {"H", "KVH"}));
  return info;
}

Batch HeadParallel::run_rank(Batch& batch, int rank) {
  if (!batch.layout_state) {
    auto created = std::make_shared<RankStates>();
    created->ranks.resize(static_cast<std::size_t>(batch.tp));
    created->spec = rank_spec(*batch.spec, batch.tp);
    batch.layout_state = created;
  }
  auto& states = *static_cast<RankStates*>(batch.layout_state.get());
  Batch share;
  share.spec = &states.spec;
  share.invocation = batch.invocation;
  share.invocation_index = batch.invocation_index;
  share.invocation_count = batch.invocation_count;
  share.reductions_wanted = batch.reductions_wanted;
  for (const auto& [name, tensor] : batch.inputs) {
    share.inputs[name] = std::make_shared<const Tensor>(column_block(*tensor, rank, batch.tp));
    share.input_ids[name] = new_input_id();
  }
  for (const auto& [name, tensor] : batch.outputs) {
    Tensor output(tensor.dtype(), {tensor.rows(), tensor.row_size() / batch.tp});
    output.fill_nan();
    share.outputs.emplace(name, std::move(output));
  }
  share.layout_state = states.ranks[static_cast<std::size_t>(rank)];
  inner_.run(share);
  states.ranks[static_cast<std::size_t>(rank)] = share.layout_state;
  if (!share.impl_config.is_null()) batch.impl_config = share.impl_config;
  return share;
}

void place_share(const Batch& share, int rank, Batch& batch) {
  for (auto& [name, tensor] : batch.outputs) {
    const Tensor& block = share.outputs.at(name);
    const std::int64_t width = tensor.row_size(), columns = block.row_size();
    for (std::int64_t r = 0; r < tensor.rows(); ++r) {
      for (std::int64_t c = 0; c < columns; ++c)
        tensor.set_bits(r * width + rank * columns + c, block.bits(r * columns + c));
    }
  }
}

}  // namespace bitcheck::attention
