// Reduction outputs left where they were made (core/device_output.h), as the runner checks them:
// a test "device" that is host memory and counts what the runner reads from it. Every check's
// result must be the host comparison's, field for field (a drift's metrics, a repeat's
// nondeterminism, the fingerprint); only the transfers change, and the layouts whose reductions
// equal the batch's never come to the host.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device_output.h"
#include "manifest.h"
#include "report/case_json.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

struct Traffic {
  std::uint64_t bytes_read = 0;
  int comparisons = 0;
};

class HostHeldOutput : public DeviceOutput {
 public:
  HostHeldOutput(Tensor tensor, std::shared_ptr<Traffic> traffic)
      : tensor_(std::move(tensor)), traffic_(std::move(traffic)) {}
  std::size_t bytes() const override { return tensor_.bytes(); }
  void read(void* host, std::size_t offset, std::size_t count) const override {
    std::memcpy(host, static_cast<const unsigned char*>(tensor_.data()) + offset, count);
    traffic_->bytes_read += count;
  }
  std::vector<std::int64_t> differing_parts(const DeviceOutput& other,
                                            std::size_t part_bytes) const override {
    const auto& held = dynamic_cast<const HostHeldOutput&>(other);
    REQUIRE(held.bytes() == bytes());
    ++traffic_->comparisons;
    std::vector<std::int64_t> parts;
    const auto* a = static_cast<const unsigned char*>(tensor_.data());
    const auto* b = static_cast<const unsigned char*>(held.tensor_.data());
    for (std::size_t at = 0, part = 0; at < bytes(); at += part_bytes, ++part) {
      const std::size_t count = std::min(part_bytes, bytes() - at);
      if (std::memcmp(a + at, b + at, count) != 0) parts.push_back(static_cast<std::int64_t>(part));
    }
    return parts;
  }

 private:
  Tensor tensor_;
  std::shared_ptr<Traffic> traffic_;
};

// A CPU matmul impl whose dW, after a layout's last invocation, stays in a HostHeldOutput when
// `holds` and the runner allows it; with `flips`, every second layout execution that computes dW
// has the last element's lowest bit flipped (the last part of the output, far from the first).
class HeldDw : public Impl {
 public:
  HeldDw(Impl& inner, bool holds, bool flips, std::shared_ptr<Traffic> traffic)
      : Impl(renamed(inner.info(), holds, flips)),
        inner_(inner),
        holds_(holds),
        flips_(flips),
        traffic_(std::move(traffic)) {}
  void run(Batch& batch) override {
    inner_.run(batch);
    if (batch.spec->pass != Pass::backward || !batch.reductions_wanted) return;
    if (batch.invocation_index + 1 < batch.invocation_count) return;
    Tensor& dw = batch.out("dw");
    if (flips_ && ++layouts_ % 2 == 0) dw.set_bits(dw.numel() - 1, dw.bits(dw.numel() - 1) ^ 1u);
    if (holds_ && batch.outputs_stay_on_device)
      batch.device_outputs["dw"] = std::make_shared<HostHeldOutput>(std::move(dw), traffic_);
  }

 private:
  static ImplInfo renamed(ImplInfo info, bool holds, bool flips) {
    info.name = std::string(holds ? "held" : "host") + (flips ? "-flipping-" : "-") + info.name;
    return info;
  }
  Impl& inner_;
  bool holds_, flips_;
  std::shared_ptr<Traffic> traffic_;
  int layouts_ = 0;
};

struct World {
  Registry registry;
  Contract contract;
  std::shared_ptr<Traffic> traffic = std::make_shared<Traffic>();
  World() {
    register_all(registry);
    for (const char* inner : {"cpu-fixed-order", "cpu-dw-tree-by-tokens"}) {
      Impl& impl = *registry.find_impl("matmul", inner);
      for (bool holds : {false, true})
        for (bool flips : {false, true})
          registry.add_impl("matmul", std::make_unique<HeldDw>(impl, holds, flips, traffic));
    }
    contract = load_embedded_contract(registry);
  }
};

CaseSpec backward_case(const std::string& impl, std::int64_t rows) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype = DType::bf16;
  spec.dtype_name = "bf16";
  spec.pass = Pass::backward;
  // dW of 64 x 512 fp32: 128 KiB, two of the runner's 64 KiB parts.
  spec.dims = {{"N", 64}, {"K", 512}};
  spec.rows = rows;
  spec.seed = 3;
  spec.layouts = {"alone", "batch", "shuffled", "pad_right", "pad_left", "ragged", "microbatch"};
  return spec;
}

// What a case found, without its timings (which are all that may differ).
nlohmann::json findings(const CaseResult& result) {
  nlohmann::json j = case_to_json(result);
  j.erase("timings");
  j.erase("id");
  j.erase("impl");
  return j;
}

}  // namespace

TEST_CASE("reductions left on the device: the host comparison's results, fewer bytes moved",
          "[device_outputs]") {
  World world;
  Runner runner(world.registry, world.contract);
  for (const std::string inner : {"cpu-fixed-order", "cpu-dw-tree-by-tokens"}) {
    for (const std::string flipping : {"-", "-flipping-"}) {
      INFO(inner << " " << flipping);
      const CaseResult host = runner.run_case(backward_case("host" + flipping + inner, 11));
      *world.traffic = {};
      const CaseResult held = runner.run_case(backward_case("held" + flipping + inner, 11));
      REQUIRE(held.verdict != Verdict::error);
      CHECK(findings(held) == findings(host));
      CHECK(held.fingerprint == host.fingerprint);
      const std::uint64_t dw_bytes = 64 * 512 * sizeof(float);
      const auto& device = held.timings.profile[Phase::device_comparisons];
      // The batch layout's dW comes over once (accuracy, fingerprint, a dump); every other layout
      // holding every token in order, and the batch's repeat, is compared on the device.
      CHECK(world.traffic->comparisons >= 2);
      CHECK(device.bytes == 2 * dw_bytes * static_cast<std::uint64_t>(world.traffic->comparisons));
      if (flipping == "-" && inner == "cpu-fixed-order") {
        CHECK(held.verdict == Verdict::pass);
        CHECK(world.traffic->bytes_read == dw_bytes);
      } else {
        // A difference brings the layout's dW over, for the drift's metrics.
        CHECK(held.verdict != Verdict::pass);
        CHECK(world.traffic->bytes_read > dw_bytes);
      }
      if (flipping == "-flipping-") {
        // Each canonical layout's repeat (alone and batch both hold every token in order) differs
        // in its last element: found on the device.
        REQUIRE(held.nondeterminism.size() == 2);
        for (const DriftMetrics& repeat : held.nondeterminism) {
          CHECK(repeat.tensor == "dw");
          CHECK(repeat.mismatch_count == 1);
          REQUIRE(repeat.first_mismatch.has_value());
          CHECK(repeat.first_mismatch->row == 63);
          CHECK(repeat.first_mismatch->column == 511);
        }
      }
    }
  }
}

TEST_CASE("a reduction left on the device by a layout that is dumped comes to the host",
          "[device_outputs]") {
  World world;
  Runner runner(world.registry, world.contract);
  CaseArtifacts artifacts;
  const CaseResult held = runner.run_case(backward_case("held-cpu-fixed-order", 5), &artifacts);
  REQUIRE(held.verdict == Verdict::pass);
  CaseArtifacts host_artifacts;
  runner.run_case(backward_case("host-cpu-fixed-order", 5), &host_artifacts);
  for (const auto& [layout, outputs] : host_artifacts.layout_outputs) {
    INFO(layout);
    REQUIRE(artifacts.layout_outputs.count(layout));
    if (!outputs.count("dw")) continue;
    REQUIRE(artifacts.layout_outputs.at(layout).count("dw"));
    CHECK(artifacts.layout_outputs.at(layout).at("dw").bitwise_equal(outputs.at("dw")));
  }
}
