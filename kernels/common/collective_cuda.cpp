// CUDA impls of the collectives over the rank processes (NCCL): NCCL as it comes (the library
// default, observed), NCCL with its protocol and channels pinned (all-reduce: tree + Simple, as
// inference engines set it, which claims batch invariance; reduce-scatter has only the ring, whose
// order follows the message size, so pinning is observed), the fixed-order collective (an exact
// peer-memory sum, or an exact all-gather, then the balanced fp32 tree over the ranks on every
// rank) and a control whose chain
// starts at a rank that rotates with the message size. Each rank uploads its own contribution (its
// slice of the row); every rank ends with the whole sum (a reduce-scatter's parts gathered back).
#include <memory>

#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/collective.h"
#include "common/gathered_sum.h"
#include "common/nccl_ranks.h"
#include "common/peer_sum.h"
#include "common/rank_sum.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;

enum class Transport { nccl_default, nccl_pinned, gathered_tree, gathered_rotating_chain };

// From this many bytes of a rank's contribution the fixed-order collective moves its data as a ring
// all-reduce does (scattered_sum); below it, one all-gather has the lower latency.
constexpr std::size_t scattered_from_bytes = std::size_t(512) << 10;

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
      return "each element summed over the ranks in one balanced fp32 tree in rank order, rounded "
             "once; the ranks' buffers read over peer memory (one shot; from 512 KiB a message two "
             "shots, a ring all-reduce's traffic), or where peer memory cannot be mapped copied "
             "exactly by NCCL (one ncclAllGather; from 512 KiB an all-to-all of parts and an "
             "all-gather of the summed parts)";
    case Transport::gathered_rotating_chain:
      return "control: ncclAllGather, then a chain in the dtype from a rank that a hash of the "
             "message size picks, so it moves with the batch (at 3 or more ranks)";
  }
  return "";
}

ImplInfo info_of(Collective collective, const NcclKind& kind) {
  const bool invariant =
      kind.transport == Transport::gathered_tree ||
      (kind.transport == Transport::nccl_pinned && collective == Collective::all_reduce);
  const bool library_default =
      kind.transport == Transport::nccl_default ||
      (kind.transport == Transport::nccl_pinned && collective != Collective::all_reduce);
  const std::string description = description_of(collective, kind.transport);
  TensorParallelism parallelism;
  parallelism.max_tp = max_tensor_parallel;
  parallelism.drifts_from_tp = kind.drifts_from_tp;
  std::vector<PathDecl> paths = {PathDecl("tp1.copy", "tp = 1: the one contribution is the sum")};
  PathDecl nccl("nccl", "what NCCL chose per call: function.algorithm.protocol.channels");
  nccl.as_family();
  if (kind.transport == Transport::gathered_tree ||
      kind.transport == Transport::gathered_rotating_chain) {
    nccl.informative();  // an exact copy whatever NCCL chooses
  }
  if (kind.transport == Transport::gathered_rotating_chain) {
    paths.push_back(PathDecl("gathered.sum", "the gathered contributions summed on every rank"));
  }
  if (kind.transport == Transport::gathered_tree) {
    // NCCL's transports are where peer memory cannot be mapped (across nodes): forced on one host.
    paths.push_back(PathDecl("peer.one_shot",
                             "every rank writes its message into every rank's memory, each sums "
                             "them all")
                        .forceable());
    paths.push_back(PathDecl("peer.two_shot",
                             "messages of 512 KiB and more: rank r sums part r of every rank's "
                             "message and writes it into every rank's memory")
                        .forceable());
    paths.push_back(
        PathDecl("gathered.sum", "the contributions all-gathered by NCCL, summed on every rank")
            .forceable());
    paths.push_back(PathDecl("scattered.sum",
                             "messages of 512 KiB and more: each rank sums its part of every "
                             "contribution (a NCCL all-to-all), the parts all-gathered")
                        .forceable());
  }
  paths.push_back(nccl);
  ImplInfo info = invariant         ? ImplInfo::invariant(kind.name, "cuda", description)
                  : library_default ? ImplInfo::library_default(kind.name, "cuda", description)
                                    : ImplInfo::control(kind.name, "cuda", description);
  info.only_passes({Pass::forward}).on_ranks(parallelism).with_paths(paths);
  return info;
}

class NcclCollective : public Impl {
 public:
  NcclCollective(Collective collective, const NcclKind& kind)
      : Impl(info_of(collective, kind)), collective_(collective), kind_(kind) {}

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
    Workspace workspace = workspace_for(mine.bytes(), tp, batch.spec->forced_path);
    reduce(send, sum, count, dtype, tp, mine.bytes(), workspace, batch.spec->forced_path);
    sum.download(y.data(), y.bytes());
  }

  // The collective on device-resident buffers of `rows` x H per rank: every rank of the group
  // runs it, each timing its own calls (rank 0's times are reported). The bytes are the bus bytes
  // of an all-reduce (2 (tp - 1) / tp of the message), whatever the transport.
  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    if (spec.tp == 1) return std::nullopt;  // one rank: a copy, nothing to time
    const int tp = spec.tp;
    const cuda::DeviceDType dtype = cs::device_dtype(spec.dtype);
    const std::size_t count = static_cast<std::size_t>(spec.rows * spec.dim("H"));
    const std::size_t bytes = count * dtype_size(spec.dtype);
    cuda::DeviceBuffer send = cuda_bench::random_input(bytes, spec.dtype, 1 + nccl::group().rank);
    cuda::DeviceBuffer sum(bytes + 16);
    Workspace workspace = workspace_for(bytes, tp, spec.forced_path);
    nccl::Asynchronous asynchronous;
    BenchMeasurement measurement = cuda_bench::time_rotated(settings, 1, [&](std::size_t) {
      reduce(send, sum, count, dtype, tp, bytes, workspace, spec.forced_path);
    });
    measurement.bytes_moved = static_cast<double>(bytes) * 2.0 * (tp - 1) / tp;
    measurement.config = {{"path", transport_of(bytes, count, tp, workspace, spec.forced_path)}};
    return measurement;
  }

 private:
  // Device buffers a call needs besides its input and output, made once per message size: the
  // peer buffers where the sum goes over peer memory (every rank maps them together, so each
  // decides from what all ranks know), else the buffers of NCCL's transports.
  struct Workspace {
    Workspace(std::size_t bytes, int tp, std::optional<cuda::PeerShape> peer_shape) {
      if (peer_shape) peer.emplace(bytes, tp, *peer_shape);
      if (peer && peer->usable()) return;
      gathered = cuda::DeviceBuffer(bytes * static_cast<std::size_t>(tp) + 16);
      parts = cuda::DeviceBuffer(bytes + 16);
      part = cuda::DeviceBuffer(bytes / static_cast<std::size_t>(tp) + 16);
    }
    cuda::DeviceBuffer gathered, parts, part;
    std::optional<cuda::PeerSum> peer;
  };

  Workspace workspace_for(std::size_t bytes, int tp, const std::string& forced_path) const {
    const bool peer_wanted = kind_.transport == Transport::gathered_tree &&
                             (forced_path.empty() || forced_path.rfind("peer.", 0) == 0);
    return Workspace(
        bytes, tp,
        peer_wanted ? cuda::peer_shape(bytes, tp, forced_shape(forced_path)) : std::nullopt);
  }

  static std::optional<cuda::PeerShape> forced_shape(const std::string& forced_path) {
    if (forced_path == "peer.one_shot") return cuda::PeerShape::one_shot;
    if (forced_path == "peer.two_shot") return cuda::PeerShape::two_shot;
    return std::nullopt;
  }

  // The shape the workspace sums in over peer memory, or nullopt where NCCL moves the data.
  static std::optional<cuda::PeerShape> peer_path(const Workspace& workspace) {
    if (!workspace.peer || !workspace.peer->usable()) return std::nullopt;
    return workspace.peer->shape();
  }

  std::string transport_of(std::size_t bytes, std::size_t count, int tp, const Workspace& workspace,
                           const std::string& forced_path) const {
    switch (kind_.transport) {
      case Transport::nccl_default:
        return "nccl (its choice)";
      case Transport::nccl_pinned:
        return "nccl (tree, Simple, 16 channels)";
      case Transport::gathered_tree:
        if (const auto shape = peer_path(workspace))
          return *shape == cuda::PeerShape::one_shot ? "peer memory, one shot"
                                                     : "peer memory, two shots";
        return scattered(bytes, count, tp, forced_path) ? "all-to-all + tree + all-gather"
                                                        : "all-gather + tree";
      case Transport::gathered_rotating_chain:
        return "all-gather + rotating chain";
    }
    return "";
  }

  bool scattered(std::size_t bytes, std::size_t count, int tp,
                 const std::string& forced_path) const {
    if (forced_path == "gathered.sum") return false;
    return kind_.transport == Transport::gathered_tree &&
           count % static_cast<std::size_t>(tp) == 0 &&
           (bytes >= scattered_from_bytes || forced_path == "scattered.sum");
  }

  void reduce(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
              cuda::DeviceDType dtype, int tp, std::size_t bytes, Workspace& workspace,
              const std::string& forced_path) const {
    switch (kind_.transport) {
      case Transport::nccl_default:
      case Transport::nccl_pinned:
        nccl_sum(send, sum, count, dtype, tp, workspace);
        return;
      case Transport::gathered_tree:
      case Transport::gathered_rotating_chain:
        if (const auto shape = peer_path(workspace)) {
          workspace.peer->all_reduce(dtype, send.get(), sum.get(), count, nullptr);
          record_path(*shape == cuda::PeerShape::one_shot ? "peer.one_shot" : "peer.two_shot");
        } else if (scattered(bytes, count, tp, forced_path)) {
          scattered_sum(send, sum, count, dtype, tp, workspace);
        } else {
          gathered_sum(send, sum, count, dtype, tp, workspace);
        }
        return;
    }
  }

  void nccl_sum(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
                cuda::DeviceDType dtype, int tp, Workspace& workspace) const {
    const nccl::CommSettings settings =
        kind_.transport == Transport::nccl_default ? nccl::library_default() : nccl::tree_simple();
    if (collective_ == Collective::all_reduce) {
      nccl::all_reduce_sum(send.get(), sum.get(), count, dtype, tp, settings);
      return;
    }
    // Rank r's part, then every part gathered back (an exact copy) for the check.
    nccl::reduce_scatter_sum(send.get(), workspace.part.get(), count, dtype, tp, settings);
    nccl::all_gather(workspace.part.get(), sum.get(), count / static_cast<std::size_t>(tp), dtype,
                     tp, nccl::library_default());
  }

  void gathered_sum(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
                    cuda::DeviceDType dtype, int tp, Workspace& workspace) const {
    nccl::all_gather(send.get(), workspace.gathered.get(), count, dtype, tp,
                     nccl::library_default());
    if (kind_.transport == Transport::gathered_tree) {
      cuda::sum_gathered_fixed_tree(dtype, workspace.gathered.get(), sum.get(), count, tp, nullptr);
    } else {
      const int start = rotating_start(static_cast<std::int64_t>(count), tp);
      cuda::sum_gathered_chain(dtype, workspace.gathered.get(), sum.get(), count, tp, start,
                               nullptr);
    }
    record_path("gathered.sum");
  }

  // The fixed tree with the traffic of a ring all-reduce: rank r receives the r-th part of every
  // contribution (an all-to-all of exact copies), sums it over the ranks in the same tree as the
  // gathered path, and the parts are all-gathered. Each element is summed in the same order on
  // either path, so the bits are the same.
  void scattered_sum(const cuda::DeviceBuffer& send, cuda::DeviceBuffer& sum, std::size_t count,
                     cuda::DeviceDType dtype, int tp, Workspace& workspace) const {
    const std::size_t part = count / static_cast<std::size_t>(tp);
    nccl::all_to_all(send.get(), workspace.parts.get(), part, dtype, tp, nccl::library_default());
    cuda::sum_gathered_fixed_tree(dtype, workspace.parts.get(), workspace.part.get(), part, tp,
                                  nullptr);
    nccl::all_gather(workspace.part.get(), sum.get(), part, dtype, tp, nccl::library_default());
    record_path("scattered.sum");
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
