// CUDA impls of matmul over rank processes (tensor parallelism, NCCL), the CUDA twins of
// matmul_tp_cpu.cpp. Row-parallel: rank r holds K's r-th share; the forward sums the ranks' partial
// products across ranks, dX and dW are rank-local and gathered. Column-parallel: rank r holds N's
// r-th share; the forward and dW are rank-local and gathered, dX sums across ranks. The sum across
// ranks (split_gemm) is:
//   fixed-order     K (or N) in 8 chunks: each chunk's product by the fixed-order GEMM on the
//                   dtype's operands with its fp32 accumulators kept (read in place from the
//                   rank's share), the chunks of a rank added in the fixed binary tree, the ranks'
//                   subtrees all-gathered (an exact copy) and the tree finished on every rank,
//                   rounded once: the same bits at every tp. From 4 MiB of fp32 subtree over
//                   peer memory one GEMM launch sums the rank's chunks in the tree and stores
//                   the subtree into the ranks' staging (peer-fused): the same bits again.
//   nccl-default    each rank's product by cuBLASLt's heuristic in the dtype, ncclAllReduce as it
//                   comes (the library default: observed).
//   nccl-tree-simple each rank's product by the fixed-order GEMM in the dtype, ncclAllReduce on
//                   the tree + Simple communicator (claims batch invariance, not across TP sizes).
//   controls        early-rounding (the fixed tree, rank subtrees rounded to the dtype before the
//                   gather), naive-pair (nccl-tree-simple's arithmetic held to tp = 1's bits) and
//                   rotating-chain (the ranks' products summed from a rank that moves with the
//                   message size).
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/adapter_support.h"
#include "common/bench_support.h"
#include "common/nccl_ranks.h"
#include "common/rank_sum_cuda.h"
#include "common/token_reduction.h"
#include "cublaslt_gemm.h"
#include "fixed_order_gemm.h"
#include "matmul/matmul.h"
#include "matmul/tp_chunk_tree.h"

namespace bitcheck {
namespace {

namespace cs = cuda_support;
using cuda::DeviceBuffer;
using cuda::GemmDType;
using cuda_tp::chunk_count;
using cuda_tp::chunk_tree_product;
using Order = cuda_tp::RankOrder;

constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

enum class Split { rows, columns };

const cuda_tp::RankOrderKind kinds[] = {
    {"fixed-order", Order::fixed_chunks, true, false, TensorParallelism::AcrossTp::claimed, 1,
     "the split sum in 8 chunks, each by the fixed-order GEMM with fp32 output, added in one fixed "
     "binary tree whose rank subtrees are all-gathered and finished on every rank, rounded once: "
     "the "
     "same bits at every tp"},
    {"nccl-default", Order::nccl_default, false, true, TensorParallelism::AcrossTp::observed, 1,
     "each rank's share by cuBLASLt's heuristic in the dtype, summed by ncclAllReduce as it comes: "
     "the library default, observed"},
    {"nccl-tree-simple", Order::nccl_pinned, true, false, TensorParallelism::AcrossTp::observed, 1,
     "each rank's share by the fixed-order GEMM in the dtype, summed by ncclAllReduce on the tree "
     "+ "
     "Simple communicator (16 channels): fixed in the batch, not across TP sizes"},
    {"early-rounding", Order::early_rounding, false, false,
     TensorParallelism::AcrossTp::expected_to_drift, 2,
     "control: the fixed-order tree with each rank's subtree rounded to the dtype before the "
     "all-gather, so tp > 1 differs from tp = 1"},
    {"naive-pair", Order::nccl_pinned, false, false, TensorParallelism::AcrossTp::expected_to_drift,
     2,
     "control: the naive TP pair, a plain fixed-order GEMM at tp = 1 against each rank's GEMM in "
     "the dtype summed by NCCL at tp > 1, held to tp = 1's bits"},
    {"rotating-chain", Order::rotating_chain, false, false, TensorParallelism::AcrossTp::observed,
     3,
     "control: each rank's share by the fixed-order GEMM in the dtype, all-gathered and summed in "
     "a "
     "chain from a rank that a hash of the message size picks (at 3 or more ranks)"},
};

GemmDType gemm_dtype(DType dtype) {
  return cs::device_dtype(dtype);
}

// Columns [first, last) of a [rows, columns] tensor, compacted.
Tensor columns_of(const Tensor& matrix, std::int64_t first, std::int64_t last) {
  const std::int64_t rows = matrix.shape()[0], width = matrix.shape()[1];
  Tensor part(matrix.dtype(), {rows, last - first});
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = first; c < last; ++c)
      part.set_bits(r * (last - first) + c - first, matrix.bits(r * width + c));
  }
  return part;
}

// Rows [first, last) of a [rows, columns] tensor.
Tensor rows_of(const Tensor& matrix, std::int64_t first, std::int64_t last) {
  Tensor part(matrix.dtype(), {last - first, matrix.shape()[1]});
  for (std::int64_t r = first; r < last; ++r) part.copy_row_from(matrix, r, r - first);
  return part;
}

// out[M, J] = a[M, I] · b[J, I]ᵀ by the fixed-order GEMM, on the device, in `dtype`.
DeviceBuffer gemm(const Tensor& a, const Tensor& b, DType out_dtype) {
  const std::int64_t m = a.shape()[0], i = a.shape()[1], j = b.shape()[0];
  DeviceBuffer a_device = cs::upload(a), b_device = cs::upload(b);
  DeviceBuffer out(static_cast<std::size_t>(m * j) * dtype_size(out_dtype) + 16);
  cuda::fixed_order_gemm(gemm_dtype(a.dtype()), a_device.get(), b_device.get(), out.get(), m, j, i,
                         nullptr);
  return out;
}

// The same with cuBLASLt's heuristic configuration (the library default's local GEMM).
DeviceBuffer heuristic_gemm(const Tensor& a, const Tensor& b) {
  const std::int64_t m = a.shape()[0], i = a.shape()[1], j = b.shape()[0];
  const GemmDType dtype = gemm_dtype(a.dtype());
  DeviceBuffer a_device = cs::upload(a), b_device = cs::upload(b);
  DeviceBuffer out(static_cast<std::size_t>(m * j) * dtype_size(a.dtype()) + 16);
  DeviceBuffer workspace(lt_workspace_bytes);
  cuda::lt_gemm(cuda::lt_heuristic_config(dtype, m, j, i), dtype, a_device.get(), b_device.get(),
                out.get(), m, j, i, workspace.get(), lt_workspace_bytes, nullptr);
  return out;
}

// The pass whose sum crosses the ranks: the one a control drifts in.
Pass split_pass(Split split) {
  return split == Split::rows ? Pass::forward : Pass::backward;
}

ImplInfo info_of(Split split, const cuda_tp::RankOrderKind& kind) {
  std::vector<PathDecl> paths = {
      PathDecl("split-sum", "a GEMM whose reduction the ranks share, summed across them"),
      PathDecl("local", "a rank-local GEMM (or dW), gathered"), cuda_tp::nccl_choices(false),
      cuda_tp::gemm_paths()};
  if (kind.order == Order::fixed_chunks) paths.push_back(cuda_tp::chunk_tree_nccl());
  return cuda_tp::rank_order_info(
             kind,
             std::string("tp-") + (split == Split::rows ? "row-" : "column-") + kind.order_name,
             std::string(split == Split::rows
                             ? "row-parallel (K split over ranks; the forward sums across them): "
                             : "column-parallel (N split over ranks; dX sums across them): ") +
                 kind.description,
             {split_pass(split)}, {split == Split::rows ? "K" : "N"}, std::move(paths))
      .timed_against(std::string("tp-") + (split == Split::rows ? "row-" : "column-") +
                     "nccl-default");
}

class MatmulTpCuda : public Impl {
 public:
  MatmulTpCuda(Split split, const cuda_tp::RankOrderKind& kind)
      : Impl(info_of(split, kind)), split_(split), kind_(kind) {}

  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    if (spec.dtype == DType::fp32 && kind_.order == Order::early_rounding)
      return "the early-rounding control rounds partials to the output dtype: a no-op in fp32";
    const std::int64_t split = spec.dim(split_ == Split::rows ? "K" : "N");
    if (split % (chunk_count * 8) != 0)
      return "the split dim must be a multiple of 64 (8 chunks of the fixed-order GEMM's 8)";
    return std::nullopt;
  }

  void run(Batch& batch) override {
    const cuda_tp::GemmPathsAsMembers gemm_paths(paths());
    const CaseSpec& spec = *batch.spec;
    const std::int64_t n = spec.dim("N"), k = spec.dim("K");
    std::vector<std::int32_t> slots = cs::real_slot_list(batch);
    const std::int64_t rows = static_cast<std::int64_t>(slots.size());
    const Tensor& w = batch.in("w");  // [N, K]
    if (spec.pass == Pass::forward) {
      const Tensor x = cs::compact_rows(batch.in("x"), slots);
      const Tensor y =
          split_ == Split::rows ? split_gemm(batch, x, w) : local_gathered(batch, x, w);
      scatter_rows(y, slots, batch.out("y"));
      return;
    }
    const Tensor x = cs::compact_rows(batch.in("x"), slots);
    const Tensor dy = cs::compact_rows(batch.in("dy"), slots);
    const Tensor wt = cs::transposed(w);  // [K, N]: dX = dY · W = dY · (Wᵀ)ᵀ
    const Tensor dx =
        split_ == Split::columns ? split_gemm(batch, dy, wt) : local_gathered(batch, dy, wt);
    scatter_rows(dx, slots, batch.out("dx"));
    accumulate_dw(batch, x, dy, n, k, rows);
  }

  // bitcheck bench: the GEMM whose reduction the ranks share, end to end on device-resident
  // operands: the row-parallel forward (x[M, K] · w[N, K]ᵀ, K split) or the column-parallel dX
  // (dy[M, N] · w, N split), each rank its share and the sum across the ranks, as run() computes
  // it: fixed-order and early-rounding its 8 / tp chunk GEMMs with fp32 output and the chunk tree,
  // the NCCL orders one GEMM in the dtype (cuBLASLt's heuristic for nccl-default) and the ranks'
  // sum. Every rank times its own calls (rank 0's are reported); the baseline is nccl-default of
  // the same split.
  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    const bool sums_across =
        split_ == Split::rows ? spec.pass == Pass::forward : spec.pass == Pass::backward;
    if (!sums_across || spec.tp < 2) return std::nullopt;
    const int tp = spec.tp, rank = nccl::group().rank;
    const std::int64_t m = spec.rows, n = spec.dim("N"), k = spec.dim("K");
    const std::int64_t width = split_ == Split::rows ? k : n, j = split_ == Split::rows ? n : k;
    const DType dtype = spec.dtype;
    const cuda::DeviceDType device_dtype = cs::device_dtype(dtype);
    const std::size_t count = static_cast<std::size_t>(m * j);
    DeviceBuffer result(count * dtype_size(dtype) + 16);
    nccl::Asynchronous asynchronous;
    BenchMeasurement measurement;
    // This rank's share of the split dim of both operands (8 / tp chunks of width / 8 for the
    // chunk orders: the same width / tp columns).
    const std::int64_t share = width / tp;
    const std::size_t element = dtype_size(dtype);
    DeviceBuffer a_share = cuda_bench::random_input(static_cast<std::size_t>(m * share) * element,
                                                    dtype, static_cast<std::uint64_t>(1 + rank));
    DeviceBuffer b_share = cuda_bench::random_input(static_cast<std::size_t>(j * share) * element,
                                                    dtype, static_cast<std::uint64_t>(101 + rank));
    if (kind_.order == Order::fixed_chunks || kind_.order == Order::early_rounding) {
      const int per_rank = chunk_count / tp;
      const std::int64_t chunk = width / chunk_count;
      DeviceBuffer leaves;
      const bool over_nccl = spec.forced_path == cuda_tp::chunk_tree_nccl_path;
      std::string transport;
      measurement = cuda_bench::time_rotated(settings, 1, [&](std::size_t) {
        transport = chunk_tree_product(kind_.order == Order::early_rounding, gemm_dtype(dtype),
                                       a_share.get(), b_share.get(), m, j, chunk, per_rank, tp,
                                       device_dtype, result.get(), over_nccl, leaves);
      });
      const std::string gemms = std::to_string(per_rank) + " chunk GEMMs";
      measurement.config = {
          {"path", transport == "peer-fused"
                       ? gemms + " summed in one kernel, stored over peer memory + the ranks' tree"
                       : gemms + " with fp32 output + chunk tree " +
                             (transport.rfind("peer", 0) == 0 ? "over peer memory" : "over NCCL")}};
    } else {
      DeviceBuffer local(count * element + 16);
      const GemmDType gemm_type = gemm_dtype(dtype);
      const bool heuristic = kind_.order == Order::nccl_default;
      DeviceBuffer workspace(heuristic ? lt_workspace_bytes : 16);
      const cuda::LtConfig config =
          heuristic ? cuda::lt_heuristic_config(gemm_type, m, j, share) : cuda::LtConfig{};
      measurement = cuda_bench::time_rotated(settings, 1, [&](std::size_t) {
        if (heuristic) {
          cuda::lt_gemm(config, gemm_type, a_share.get(), b_share.get(), local.get(), m, j, share,
                        workspace.get(), lt_workspace_bytes, nullptr);
        } else {
          cuda::fixed_order_gemm(gemm_type, a_share.get(), b_share.get(), local.get(), m, j, share,
                                 nullptr);
        }
        cuda_tp::sum_rank_shares(kind_.order, local.get(), count, device_dtype, tp, result.get());
      });
      measurement.config = {
          {"path", std::string(heuristic ? "cuBLASLt heuristic" : "fixed-order GEMM") +
                       " on the rank's share + the ranks' sum"}};
    }
    measurement.flops =
        2.0 * static_cast<double>(m) * static_cast<double>(j) * static_cast<double>(width);
    return measurement;
  }

 private:
  static void scatter_rows(const Tensor& packed, const std::vector<std::int32_t>& slots,
                           Tensor& out) {
    for (std::size_t i = 0; i < slots.size(); ++i)
      out.copy_row_from(packed, static_cast<std::int64_t>(i), slots[i]);
  }

  // a[M, I] · b[J, I]ᵀ with I split over the ranks and summed across them in the kind's order.
  Tensor split_gemm(const Batch& batch, const Tensor& a, const Tensor& b) const {
    const int tp = batch.tp, rank = tp > 1 ? nccl::group().rank : 0;
    const std::int64_t m = a.shape()[0], width = a.shape()[1], j = b.shape()[0];
    const DType dtype = a.dtype();
    const cuda::DeviceDType device_dtype = cs::device_dtype(dtype);
    const std::size_t count = static_cast<std::size_t>(m * j);
    Tensor out(dtype, {m, j});
    if (m == 0) return out;
    record_path("split-sum");
    DeviceBuffer result(out.bytes() + 16);
    if (kind_.order == Order::fixed_chunks || kind_.order == Order::early_rounding) {
      // This rank's chunks as fp32 products, the leaves of the fixed tree.
      const int per_rank = chunk_count / tp;
      const std::int64_t chunk = width / chunk_count, first = rank * per_rank * chunk;
      DeviceBuffer a_share = cs::upload(columns_of(a, first, first + per_rank * chunk));
      DeviceBuffer b_share = cs::upload(columns_of(b, first, first + per_rank * chunk));
      DeviceBuffer leaves;
      chunk_tree_product(kind_.order == Order::early_rounding, gemm_dtype(dtype), a_share.get(),
                         b_share.get(), m, j, chunk, per_rank, tp, device_dtype, result.get(),
                         batch.spec->forced_path == cuda_tp::chunk_tree_nccl_path, leaves);
      result.download(out.data(), out.bytes());
      return out;
    }
    // The NCCL orders: this rank's share as one GEMM in the dtype, then the ranks' sum.
    const std::int64_t share = width / tp, first = rank * share;
    const Tensor a_share = columns_of(a, first, first + share);
    const Tensor b_share = columns_of(b, first, first + share);
    DeviceBuffer local = kind_.order == Order::nccl_default ? heuristic_gemm(a_share, b_share)
                                                            : gemm(a_share, b_share, dtype);
    cuda_tp::sum_rank_shares(kind_.order, local.get(), count, device_dtype, tp, result.get());
    result.download(out.data(), out.bytes());
    return out;
  }

  // a[M, I] · b[J, I]ᵀ with J split over the ranks: each rank its share of the columns by the
  // fixed-order GEMM, all-gathered (an exact copy).
  Tensor local_gathered(const Batch& batch, const Tensor& a, const Tensor& b) const {
    const int tp = batch.tp, rank = tp > 1 ? nccl::group().rank : 0;
    const std::int64_t m = a.shape()[0], j = b.shape()[0], share = j / tp;
    if (m == 0) return Tensor(a.dtype(), {m, j});
    record_path("local");
    DeviceBuffer local = gemm(a, rows_of(b, rank * share, (rank + 1) * share), a.dtype());
    return cuda_tp::gather_column_shares(local, tp, m, j, a.dtype());
  }

  // dW [N, K] += dYᵀ · X over the tokens in token order: each rank its share (K's columns for
  // row-parallel, N's rows for column-parallel) by the fixed-order token-sequential kernel.
  void accumulate_dw(Batch& batch, const Tensor& x, const Tensor& dy, std::int64_t n,
                     std::int64_t k, std::int64_t rows) const {
    Tensor& dw = batch.out("dw");
    const int tp = batch.tp, rank = tp > 1 ? nccl::group().rank : 0;
    record_path("local");
    if (split_ == Split::rows) {
      const std::int64_t share = k / tp;
      const Tensor x_share = columns_of(x, rank * share, (rank + 1) * share);
      const Tensor dw_share = columns_of(dw, rank * share, (rank + 1) * share);
      DeviceBuffer dw_device = cs::upload(dw_share);
      if (rows > 0) {
        DeviceBuffer dy_device = cs::upload(dy), x_device = cs::upload(x_share);
        cuda::fixed_order_gemm_dw_accumulate(gemm_dtype(dy.dtype()), dy_device.get(),
                                             x_device.get(), dw_device.as<float>(), rows, n, share,
                                             nullptr);
      }
      const Tensor whole = cuda_tp::gather_column_shares(dw_device, tp, n, k, DType::fp32);
      std::copy_n(static_cast<const std::byte*>(whole.data()), whole.bytes(),
                  static_cast<std::byte*>(dw.data()));
      return;
    }
    const std::int64_t share = n / tp;
    const Tensor dy_share = columns_of(dy, rank * share, (rank + 1) * share);
    DeviceBuffer dw_device = cs::upload(rows_of(dw, rank * share, (rank + 1) * share));
    if (rows > 0) {
      DeviceBuffer dy_device = cs::upload(dy_share), x_device = cs::upload(x);
      cuda::fixed_order_gemm_dw_accumulate(gemm_dtype(dy.dtype()), dy_device.get(), x_device.get(),
                                           dw_device.as<float>(), rows, share, k, nullptr);
    }
    Tensor gathered(DType::fp32, {n, k});  // rank-major rows are the rows in order
    if (tp == 1) {
      cuda::synchronize();
      dw_device.download(gathered.data(), gathered.bytes());
    } else {
      DeviceBuffer all(gathered.bytes() + 16);
      nccl::all_gather(dw_device.get(), all.get(), static_cast<std::size_t>(share * k),
                       cuda::DeviceDType::fp32, tp, nccl::library_default());
      all.download(gathered.data(), gathered.bytes());
    }
    std::copy_n(static_cast<const std::byte*>(gathered.data()), gathered.bytes(),
                static_cast<std::byte*>(dw.data()));
  }

  Split split_;
  const cuda_tp::RankOrderKind& kind_;
};

}  // namespace

void register_matmul_tp_cuda(Registry& registry) {
  for (Split split : {Split::rows, Split::columns}) {
    for (const cuda_tp::RankOrderKind& kind : kinds)
      registry.add_impl("matmul", std::make_unique<MatmulTpCuda>(split, kind));
  }
}

}  // namespace bitcheck
