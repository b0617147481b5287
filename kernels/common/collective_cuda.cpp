// CUDA impls of the collectives over the rank processes (NCCL): NCCL as it comes (the library
// default, observed), NCCL with its protocol and channels pinned (all-reduce: tree + Simple, as
// inference engines set it, which claims batch invariance; reduce-scatter has only the ring, whose
// order follows the message size, so pinning is observed), the fixed-order collective (an exact
// all-gather, then the balanced fp32 tree over the ranks on every rank) and a control whose chain
// starts at a rank that rotates with the message size. Each rank uploads its own contribution (its
// slice of the row); every rank ends with the whole sum (a reduce-scatter's parts gathered back).
#include <memory>

#include "common/adapter_support.h"
#include "common/collective.h"
#include "common/gathered_sum.h"
#include "common/nccl_ranks.h"
#include "common/rank_sum.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;

enum class Transport { nccl_default, nccl_pinned, gathered_tree, gathered_rotating_chain };

struct NcclKind {
  const char* name;
  Transport transport;
  int drifts_from_tp;
};

constexpr NcclKind kinds[] = {
    {"nccl-default", Transport::nccl_default, 1},
    {"nccl-tree-simple", Transport::nccl_pinned, 1},
    {"fixed-order", Transport::gathered_tree, 1},
    {"rotating-chain", Transport::gathered_rotating_chain, 3},
};

std::string description_of(Collective collective, Transport transport) {
  const std::string call =
      collective == Collective::all_reduce ? "ncclAllReduce (sum)" : "ncclReduceScatter (sum)";
  switch (transport) {
    case Transport::nccl_default:
      return call +
             " with NCCL's own choice of algorithm, protocol and channels per call: the "
             "library default, observed";
    case Transport::nccl_pinned:
      return collective == Collective::all_reduce
                 ? call +
                       " on a communicator created with NCCL_ALGO=allreduce:tree, "
                       "NCCL_PROTO=Simple and 16 channels (min = max CTAs), as inference "
                       "engines pin it"
                 : call +
                       " on the communicator of NCCL_PROTO=Simple and 16 channels: the ring, "
                       "reduce-scatter's one algorithm here, reduces each part from the rank "
                       "after its owner, an order that follows the message size (observed)";
    case Transport::gathered_tree:
      return "ncclAllGather of the contributions (an exact copy), then on every rank one thread "
             "per element sums the ranks in one balanced fp32 tree in rank order, rounded once";
    case Transport::gathered_rotating_chain:
      return "control: ncclAllGather, then a chain in the dtype from a rank that a hash of the "
             "message size picks, so it moves with the batch (at 3 or more ranks)";
  }
  return "";
}

class NcclCollective : public Impl {
 public:
  NcclCollective(Collective collective, const NcclKind& kind)
      : collective_(collective), kind_(kind) {}
  std::string name() const override { return kind_.name; }
  std::string backend() const override { return "cuda"; }
  bool claims_invariance() const override {
    return kind_.transport == Transport::gathered_tree ||
           (kind_.transport == Transport::nccl_pinned && collective_ == Collective::all_reduce);
  }
  bool is_library_default() const override {
    return kind_.transport == Transport::nccl_default ||
           (kind_.transport == Transport::nccl_pinned && collective_ != Collective::all_reduce);
  }
  std::string description() const override { return description_of(collective_, kind_.transport); }
  bool supports(Pass pass) const override { return pass == Pass::forward; }
  TensorParallelism tensor_parallelism() const override {
    TensorParallelism parallelism;
    parallelism.max_tp = max_tensor_parallel;
    parallelism.drifts_from_tp = kind_.drifts_from_tp;
    return parallelism;
  }
  std::vector<PathDecl> paths() const override {
    std::vector<PathDecl> paths = {PathDecl("tp1.copy", "tp = 1: the one contribution is the sum")};
    PathDecl nccl("nccl", "what NCCL chose per call: function.algorithm.protocol.channels");
    nccl.as_family();
    if (kind_.transport == Transport::gathered_tree ||
        kind_.transport == Transport::gathered_rotating_chain) {
      paths.push_back(PathDecl("gathered.sum", "the gathered contributions summed on every rank"));
      nccl.informative();  // an exact copy whatever NCCL chooses
    }
    paths.push_back(nccl);
    return paths;
  }

  void run(Batch& batch) override {
    const std::int64_t h = batch.spec->dim("H");
    const Tensor& x = batch.in("x");
    Tensor& y = batch.out("y");
    if (batch.tp == 1) {  // rows of one contribution: copied, bits and all
      for (std::int64_t slot = 0; slot < batch.slots(); ++slot) y.copy_row_from(x, slot, slot);
      record_path("tp1.copy");
      return;
    }
    const int tp = batch.tp, rank = nccl::group().rank;
    const cuda::DeviceDType dtype = cs::device_dtype(batch.spec->dtype);
    const std::size_t count = static_cast<std::size_t>(batch.slots() * h);
    Tensor mine(batch.spec->dtype, {batch.slots(), h});  // this rank's slice of every slot's row
    for (std::int64_t slot = 0; slot < batch.slots(); ++slot) {
      for (std::int64_t c = 0; c < h; ++c)
        mine.set_bits(slot * h + c, x.bits((slot * tp + rank) * h + c));
    }
    cuda::DeviceBuffer send = cs::upload(mine);
    cuda::DeviceBuffer sum(y.bytes() + 16);
    switch (kind_.transport) {
      case Transport::nccl_default:
      case Transport::nccl_pinned:
        nccl_sum(send, sum, count, dtype, tp, mine.bytes());
        break;
      case Transport::gathered_tree:
      case Transport::gathered_rotating_chain:
        gathered_sum(send, sum, count, dtype, tp, mine.bytes());
        break;
    }
    sum.download(y.data(), y.bytes());
  }

 private:
  void nccl_sum(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
                cuda::DeviceDType dtype, int tp, std::size_t bytes) const {
    const nccl::CommSettings settings =
        kind_.transport == Transport::nccl_default ? nccl::library_default() : nccl::tree_simple();
    if (collective_ == Collective::all_reduce) {
      nccl::all_reduce_sum(send.get(), sum.get(), count, dtype, tp, settings);
      return;
    }
    // Rank r's part, then every part gathered back (an exact copy) for the check.
    cuda::DeviceBuffer part(bytes / static_cast<std::size_t>(tp) + 16);
    nccl::reduce_scatter_sum(send.get(), part.get(), count, dtype, tp, settings);
    nccl::all_gather(part.get(), sum.get(), count / static_cast<std::size_t>(tp), dtype, tp,
                     nccl::library_default());
  }

  void gathered_sum(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
                    cuda::DeviceDType dtype, int tp, std::size_t bytes) const {
    cuda::DeviceBuffer gathered(bytes * static_cast<std::size_t>(tp) + 16);
    nccl::all_gather(send.get(), gathered.get(), count, dtype, tp, nccl::library_default());
    if (kind_.transport == Transport::gathered_tree) {
      cuda::sum_gathered_fixed_tree(dtype, gathered.get(), sum.get(), count, tp, nullptr);
    } else {
      const int start = rotating_start(static_cast<std::int64_t>(count), tp);
      cuda::sum_gathered_chain(dtype, gathered.get(), sum.get(), count, tp, start, nullptr);
    }
    cuda::synchronize();
    record_path("gathered.sum");
  }

  Collective collective_;
  const NcclKind& kind_;
};

}  // namespace

void register_collective_cuda(Registry& registry, Collective collective) {
  for (const NcclKind& kind : kinds)
    registry.add_impl(collective_name(collective),
                      std::make_unique<NcclCollective>(collective, kind));
}

}  // namespace bitcheck
