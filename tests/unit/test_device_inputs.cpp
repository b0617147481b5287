// Row inputs generated on a device (core/device_input_source.h), as the runner places them in each
// invocation's slots there: a stand-in device backend whose memory is the host's, and a matmul impl
// that reads its row input only from Batch::device_inputs. In every layout (shuffled, padded,
// ragged, micro-batched) it must get the rows the host would have staged, pads poisoned as the
// host poisons them, and the case the host-input twin's fingerprint; a source whose bits are wrong
// must make the case fail (the check can fail).
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "case_support.h"
#include "core/device_input_source.h"
#include "run/host_held_output.h"
#include "run/input_generator.h"

using namespace bitcheck;
using case_support::describe;
using case_support::world;

namespace {

const char* const device_backend = "host-input-device";

// A device backend whose "device" is host memory, generating uniform row inputs there with the
// host generator (or, `wrong_seed`, with another seed: bits no host input has).
class HostInputDevice : public DeviceBackend, public DeviceInputSource {
 public:
  explicit HostInputDevice(bool wrong_seed) : wrong_seed_(wrong_seed) {}
  nlohmann::json meta() const override { return nlohmann::json::object(); }
  double copy_bandwidth_gbps() const override { return -1; }
  double copy_bandwidth_gbps(double, int, int, std::size_t) const override { return -1; }
  std::optional<std::size_t> free_memory_bytes() const override { return std::size_t(64) << 30; }
  std::optional<std::string> context_fault() const override { return std::nullopt; }
  std::shared_ptr<DeviceOutput> generated_rows(const TensorDecl& decl, std::int64_t rows,
                                               std::uint64_t seed,
                                               double special_value_rate) const override {
    if (decl.generator != Generator::uniform) return nullptr;
    std::vector<std::int64_t> shape = {rows};
    shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
    ++generated;
    return std::make_shared<HostHeldOutput>(
        generate_input(decl, shape, wrong_seed_ ? seed + 1 : seed, special_value_rate));
  }
  mutable int generated = 0;

 private:
  bool wrong_seed_;
};

// matmul summing K in index order per row; with `device_inputs`, x is read from the batch's
// device inputs only (its host tensor is not there), and every pad slot's bytes are checked.
class InputMatmul : public Impl {
 public:
  InputMatmul(ImplInfo info, bool device_inputs)
      : Impl(device_inputs ? std::move(info.reading_row_inputs_on_device()) : std::move(info)),
        device_inputs_(device_inputs) {}
  void run(Batch& batch) override {
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    Tensor x_held;
    const Tensor* x = nullptr;
    if (device_inputs_) {
      auto held = batch.device_inputs.find("x");
      REQUIRE(held != batch.device_inputs.end());
      REQUIRE(batch.inputs.count("x") == 0);
      x_held = Tensor(batch.spec->dtype, {batch.slots(), k}, Tensor::uninitialized);
      REQUIRE(held->second->bytes() == x_held.bytes());
      held->second->read(x_held.data(), 0, x_held.bytes());
      const std::uint32_t poison = Tensor::poisoned(batch.spec->dtype, {1}).bits(0);
      for (std::int64_t s = 0; s < batch.slots(); ++s) {
        if (!batch.is_pad(s)) continue;
        for (std::int64_t c = 0; c < k; ++c) pads_wrong += x_held.bits(s * k + c) != poison;
        ++pads_seen;
      }
      x = &x_held;
      ++device_calls;
    } else {
      x = &batch.in("x");
    }
    const Tensor& w = batch.in("w");
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (std::int64_t c = 0; c < k; ++c) sum += x->get(s * k + c) * w.get(j * k + c);
        y.set(s * n + j, sum);
      }
    }
  }
  int device_calls = 0, pads_seen = 0, pads_wrong = 0;

 private:
  bool device_inputs_;
};

struct InputWorld {
  Registry registry;
  Contract contract;
  HostInputDevice* device = nullptr;
  InputMatmul* on_device = nullptr;
  explicit InputWorld(bool wrong_seed) {
    registry.add_op(*world().registry.find_op("matmul"));
    registry.set_backend_status(device_backend, true, "");
    auto backend = std::make_unique<HostInputDevice>(wrong_seed);
    device = backend.get();
    registry.set_device_backend(device_backend, std::move(backend));
    auto held = std::make_unique<InputMatmul>(
        ImplInfo::invariant("device-inputs", device_backend, "index order")
            .only_passes({Pass::forward}),
        true);
    on_device = held.get();
    registry.add_impl("matmul", std::move(held));
    registry.add_impl("matmul",
                      std::make_unique<InputMatmul>(
                          ImplInfo::invariant("host-inputs", device_backend, "index order")
                              .only_passes({Pass::forward}),
                          false));
    contract = world().contract;
  }
};

CaseSpec input_case(const std::string& impl) {
  CaseSpec spec = case_support::make_case("matmul", impl, DType::bf16, Pass::forward,
                                          {{"N", 8}, {"K", 16}}, 9, 3);
  spec.layouts = {"alone", "batch", "shuffled", "pad_right", "pad_left", "ragged", "microbatch"};
  return spec;
}

}  // namespace

TEST_CASE("row inputs generated on a device reach every invocation's slots as the host's would",
          "[device_inputs]") {
  InputWorld device_world(false);
  Runner runner(device_world.registry, device_world.contract);
  const CaseResult on_device = runner.run_case(input_case("device-inputs"));
  const CaseResult on_host = runner.run_case(input_case("host-inputs"));
  INFO(describe(on_device) << "\n" << describe(on_host));
  CHECK(on_device.verdict == Verdict::pass);
  CHECK(on_host.verdict == Verdict::pass);
  // The same bits: the impl computed on the same rows in every layout.
  CHECK(on_device.fingerprint == on_host.fingerprint);
  CHECK(on_device.layouts_run == on_host.layouts_run);
  // Generated once for the case (x; w is a parameter), read there by every invocation, its pads
  // poisoned.
  CHECK(device_world.device->generated == 1);
  CHECK(device_world.on_device->device_calls > 9);
  CHECK(device_world.on_device->pads_seen > 0);
  CHECK(device_world.on_device->pads_wrong == 0);
  // Staged on the host: only the host-input twin's rows.
  CHECK(on_device.timings.profile[Phase::staging].bytes <
        on_host.timings.profile[Phase::staging].bytes);
}

TEST_CASE("row inputs generated on a device with other bits than the host's fail the case",
          "[device_inputs]") {
  InputWorld wrong(true);
  Runner runner(wrong.registry, wrong.contract);
  const CaseResult result = runner.run_case(input_case("device-inputs"));
  INFO(describe(result));
  // Every layout computed on the device's rows, the reference on the host's: inaccurate.
  CHECK(result.verdict != Verdict::pass);
  CHECK(result.verdict != Verdict::error);
}
