// CUDA impls of rope: `fixed-order` (angle = fp32(pos) * inv_freq, sincosf) and the control
// `chunk-relative-angle` (angle composed from the position relative to the invocation's first real
// position, as chunked-prefill kernels do); and the device-resident benchmark.
#include <memory>

#include "common/adapter_support.h"
#include "common/runtime.h"
#include "core/op.h"
#include "rope/rope.h"
#include "rope/rope_math.h"
#include "rope_kernels.h"

namespace bitcheck {
namespace {

using cuda::DeviceBuffer;
namespace support = cuda_support;

class CudaRope : public Impl {
 public:
  CudaRope(ImplInfo info, bool chunk_relative)
      : Impl(std::move(info.reading_row_inputs_on_device())), chunk_relative_(chunk_relative) {}

  void run(Batch& batch) override {
    const bool backward = batch.spec->pass == Pass::backward;
    cuda::RopeLaunch launch = base_launch(*batch.spec, batch.slots());
    DeviceBuffer in = support::input_rows(batch, backward ? "dy" : "x");
    const Tensor& positions = batch.in("positions");
    // Pad slots carry INT32_MIN positions; the kernel skips negative ones.
    DeviceBuffer position_buffer = support::upload(positions);
    Tensor& host_out = batch.out(backward ? "dx" : "y");
    DeviceBuffer out(std::max<std::size_t>(host_out.bytes(), 16));
    out.fill_bytes(0xFF);  // pad slots are never written: NaN, as the runner poisons them
    const DeviceBuffer& frequencies = frequencies_for(launch.rotary_dim);
    launch.in = in.get();
    launch.out = out.get();
    launch.positions = position_buffer.as<std::int32_t>();
    launch.inverse_frequency = frequencies.as<float>();
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      launch.chunk_start = positions.get_int(s);
      break;
    }
    cuda::rope_launch(launch, nullptr);
    support::hand_over_rows(batch, backward ? "dx" : "y", out);
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    cuda::RopeLaunch base = base_launch(spec, spec.rows);
    const std::size_t row_bytes =
        static_cast<std::size_t>(spec.rows * base.heads * base.head_dim) * dtype_size(spec.dtype);
    const std::size_t set_bytes =
        2 * row_bytes + static_cast<std::size_t>(spec.rows) * sizeof(std::int32_t);
    const std::size_t sets = support::rotation_sets(set_bytes, settings);
    std::vector<std::int32_t> position_list(static_cast<std::size_t>(spec.rows));
    for (std::size_t t = 0; t < position_list.size(); ++t) {
      position_list[t] =
          static_cast<std::int32_t>((t * 7919) % static_cast<std::size_t>(rope::max_position));
    }
    const DeviceBuffer& frequencies = frequencies_for(base.rotary_dim);
    std::vector<DeviceBuffer> buffers;
    std::vector<cuda::RopeLaunch> launches;
    for (std::size_t s = 0; s < sets; ++s) {
      cuda::RopeLaunch launch = base;
      buffers.push_back(support::random_input(row_bytes, spec.dtype, 1 + s));
      launch.in = buffers.back().get();
      buffers.emplace_back(row_bytes);
      launch.out = buffers.back().get();
      buffers.push_back(support::upload(position_list));
      launch.positions = buffers.back().as<std::int32_t>();
      launch.inverse_frequency = frequencies.as<float>();
      launches.push_back(launch);
    }
    BenchMeasurement measurement = support::time_rotated(
        settings, sets, [&](std::size_t s) { cuda::rope_launch(launches[s], nullptr); });
    measurement.bytes_moved = static_cast<double>(set_bytes);
    measurement.config = {{"rotated_sets", sets}};
    return measurement;
  }

 private:
  cuda::RopeLaunch base_launch(const CaseSpec& spec, std::int64_t slots) const {
    cuda::RopeLaunch launch;
    launch.dtype = support::device_dtype(spec.dtype);
    launch.slots = slots;
    launch.heads = spec.dim("heads");
    launch.head_dim = spec.dim("head_dim");
    launch.rotary_dim = spec.dim("rotary_dim");
    launch.style = spec.dim("style");
    launch.backward = spec.pass == Pass::backward;
    launch.chunk_relative = chunk_relative_;
    return launch;
  }

  const DeviceBuffer& frequencies_for(std::int64_t rotary_dim) {
    auto it = frequencies_.find(rotary_dim);
    if (it != frequencies_.end()) return it->second;
    std::vector<float> values = rope::inverse_frequencies(rotary_dim);
    DeviceBuffer buffer(std::max<std::size_t>(values.size() * sizeof(float), 16));
    buffer.upload(values.data(), values.size() * sizeof(float));
    return frequencies_.emplace(rotary_dim, std::move(buffer)).first->second;
  }

  bool chunk_relative_;
  std::map<std::int64_t, DeviceBuffer> frequencies_;
};

}  // namespace

void register_rope_cuda(Registry& registry) {
  const std::vector<PathDecl> paths = {
      PathDecl("vector", "16-byte groups, the angle table in shared memory"),
      PathDecl("scalar",
               "one element at a time (head or rotary dims off the 16-byte grid, unaligned "
               "buffers)")};
  register_impls<CudaRope, bool>(
      registry, "rope",
      {{ImplInfo::invariant("fixed-order", "cuda",
                            "angle = fp32(pos) * inv_freq (inv_freq rounded once from double), "
                            "sincosf once per (slot, pair), explicitly rounded rotation; the "
                            "16-byte vector kernel and the scalar kernel (odd shapes, unaligned "
                            "buffers) evaluate the same per-element formula")
            .with_paths(paths),
        false},
       {ImplInfo::control("chunk-relative-angle", "cuda",
                          "control: angle = (pos - chunk_start) * inv_freq + chunk_start * "
                          "inv_freq, chunk_start = the invocation's first real position")
            .with_paths(paths),
        true}});
}

}  // namespace bitcheck
