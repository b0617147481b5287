// CUDA impls of embedding: the fixed-order impl (device gather; dtable by a host stable sort of
// (id, token order) and a device segment sum in token order) and the atomicAdd scatter control.
// Host adapters plus the device-resident forward benchmark.
#include <algorithm>
#include <memory>
#include <numeric>

#include "common/runtime.h"
#include "common/vocab_device.h"
#include "core/op.h"
#include "embedding/embedding.h"
#include "embedding_kernels.h"

namespace bitcheck {
namespace {

namespace vd = vocab_device;

class CudaEmbedding : public Impl {
 public:
  CudaEmbedding(ImplInfo info, bool atomic_scatter)
      : Impl(std::move(info.reading_row_inputs_on_device())), atomic_scatter_(atomic_scatter) {}

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const std::int64_t vocab = spec.dim("V"), hidden = spec.dim("H");
    const cuda::DeviceDType dtype = vd::device_dtype(spec.dtype);
    std::vector<std::int32_t> slots = vd::real_slot_list(batch);
    const std::int64_t rows = static_cast<std::int64_t>(slots.size());
    cuda::DeviceBuffer ids = vd::input_rows(batch, "ids");
    cuda::DeviceBuffer slot_list = vd::upload(slots);
    vd::ErrorRecord error;
    if (spec.pass == Pass::forward) {
      auto table = vd::shared_parameter(batch, "table");
      Tensor& out = batch.out("out");
      cuda::DeviceBuffer out_device(out.bytes());
      out_device.fill_bytes(0xFF);  // pad rows stay NaN
      cuda::embedding_gather(dtype, ids.as<std::int32_t>(), slot_list.as<std::int32_t>(), rows,
                             table->get(), vocab, hidden, out_device.get(), error.get(), nullptr);
      error.check("embedding", vocab);
      cuda_support::hand_over_rows(batch, "out", out_device);
      return;
    }
    if (!batch.reductions_wanted) return;  // no check reads this layout's dtable
    cuda::DeviceBuffer& dtable_device = vd::carried_accumulator(batch, "dtable");
    cuda::DeviceBuffer dout = vd::input_rows(batch, "dout");
    if (atomic_scatter_) {
      cuda::embedding_backward_atomic(dtype, dout.get(), hidden, ids.as<std::int32_t>(),
                                      slot_list.as<std::int32_t>(), rows, vocab,
                                      dtable_device.as<float>(), error.get(), nullptr);
      error.check("embedding", vocab);
    } else {
      embedding_table_grad_on_device(batch, 0, vocab, dout.get(), dtable_device.as<float>());
    }
    vd::download_after_last(batch, "dtable", dtable_device);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override;

 private:
  bool atomic_scatter_;
};

std::optional<BenchMeasurement> CudaEmbedding::benchmark(const CaseSpec& spec,
                                                         const BenchSettings& settings) {
  if (spec.pass != Pass::forward) return std::nullopt;  // the gather is the hot path
  const std::int64_t rows = spec.rows, vocab = spec.dim("V"), hidden = spec.dim("H");
  const std::size_t element = dtype_size(spec.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(hidden) * element;
  // Per set: the rows gathered, the rows written, the ids. The table is shared (and large).
  const std::size_t set_bytes =
      static_cast<std::size_t>(rows) * (2 * row_bytes + sizeof(std::int32_t));
  const std::size_t sets = vd::rotation_sets(set_bytes, settings);
  cuda::DeviceBuffer table =
      vd::random_input(static_cast<std::size_t>(vocab) * row_bytes, spec.dtype, 1);
  std::vector<std::int32_t> slot_list(static_cast<std::size_t>(rows));
  std::iota(slot_list.begin(), slot_list.end(), 0);
  cuda::DeviceBuffer slots = vd::upload(slot_list);
  std::vector<cuda::DeviceBuffer> ids, outs;
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < sets; ++i) {
    std::vector<std::int32_t> set_ids(static_cast<std::size_t>(rows));
    for (auto& id :
         set_ids) {  // spread over the table: distinct rows, as real token ids mostly are
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      id = static_cast<std::int32_t>((state >> 33) % static_cast<std::uint64_t>(vocab));
    }
    ids.push_back(vd::upload(set_ids));
    outs.emplace_back(static_cast<std::size_t>(rows) * row_bytes);
  }
  vd::ErrorRecord error;
  const cuda::DeviceDType dtype = vd::device_dtype(spec.dtype);
  BenchMeasurement measurement = vd::time_rotated(settings, sets, [&](std::size_t i) {
    cuda::embedding_gather(dtype, ids[i].as<std::int32_t>(), slots.as<std::int32_t>(), rows,
                           table.get(), vocab, hidden, outs[i].get(), error.get(), nullptr);
  });
  error.check("embedding benchmark", vocab);
  measurement.bytes_moved = static_cast<double>(set_bytes);
  measurement.config = {{"rotation_sets", sets}, {"kernel", "embedding_gather"}};
  return measurement;
}

}  // namespace

void embedding_table_grad_on_device(const Batch& batch, std::int64_t first_id, std::int64_t last_id,
                                    const void* dout, float* dtable) {
  const Tensor& ids = batch.in("ids");
  std::vector<std::int32_t> sorted;
  for (std::int32_t slot : vd::real_slot_list(batch)) {
    const std::int32_t id = checked_token_id(batch, slot);
    if (id >= first_id && id < last_id) sorted.push_back(slot);
  }
  // Stable sort of the tokens by id (token order kept inside an id), one segment per id.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](std::int32_t a, std::int32_t b) { return ids.get_int(a) < ids.get_int(b); });
  std::vector<std::int32_t> starts, segment_ids;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const auto row = static_cast<std::int32_t>(ids.get_int(sorted[i]) - first_id);
    if (segment_ids.empty() || segment_ids.back() != row) {
      starts.push_back(static_cast<std::int32_t>(i));
      segment_ids.push_back(row);
    }
  }
  starts.push_back(static_cast<std::int32_t>(sorted.size()));
  cuda::DeviceBuffer sorted_device = vd::upload(sorted), starts_device = vd::upload(starts),
                     rows_device = vd::upload(segment_ids);
  cuda::embedding_backward_segments(vd::device_dtype(batch.spec->dtype), dout, batch.spec->dim("H"),
                                    sorted_device.as<std::int32_t>(),
                                    starts_device.as<std::int32_t>(),
                                    rows_device.as<std::int32_t>(),
                                    static_cast<std::int64_t>(segment_ids.size()), dtable, nullptr);
}

void register_embedding_cuda(Registry& registry) {
  const PathDecl gather("gather", "forward: rows copied by id");
  register_impls<CudaEmbedding, bool>(
      registry, "embedding",
      {{ImplInfo::invariant("fixed-order", "cuda",
                            "gather copies rows (ids checked on the device); dtable: stable sort "
                            "of (id, token order) on the host, then one device thread per (id, "
                            "column) adds the id's tokens in token order to the running fp32 value")
            .with_paths({gather, PathDecl("dtable.id-segments",
                                          "dtable: one segment per id, tokens in token order")}),
        false},
       {ImplInfo::control("atomic-add-scatter", "cuda",
                          "control: dtable by atomicAdd of every (token, column) into the fp32 "
                          "table, the usual embedding-backward scatter; the order of additions is "
                          "the hardware's")
            .drifting_in({Pass::backward})
            .with_paths({gather, PathDecl("dtable.atomic",
                                          "dtable: every (token, column) added atomically")}),
        true}});
}

}  // namespace bitcheck
