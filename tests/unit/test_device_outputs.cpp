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
#include "run/host_held_output.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

struct Traffic {
  std::uint64_t bytes_read = 0;
  int comparisons = 0;
};

// The runner's host-held output (run/host_held_output.h), counting the reads and comparisons the
// runner makes of it.
class CountingOutput : public HostHeldOutput {
 public:
  CountingOutput(Tensor tensor, std::shared_ptr<Traffic> traffic)
      : HostHeldOutput(std::move(tensor)), traffic_(std::move(traffic)) {}
  CountingOutput(std::size_t bytes, std::uint32_t pattern, std::size_t element_bytes,
                 std::shared_ptr<Traffic> traffic)
      : HostHeldOutput(bytes, pattern, element_bytes), traffic_(std::move(traffic)) {}
  void read(void* host, std::size_t offset, std::size_t count) const override {
    HostHeldOutput::read(host, offset, count);
    traffic_->bytes_read += count;
  }
  std::vector<std::int64_t> differing_parts(const DeviceOutput& other,
                                            std::size_t part_bytes) const override {
    REQUIRE(other.bytes() == bytes());
    ++traffic_->comparisons;
    return HostHeldOutput::differing_parts(other, part_bytes);
  }
  std::shared_ptr<DeviceOutput> make_output(std::size_t bytes, std::uint32_t pattern,
                                            std::size_t element_bytes) const override {
    return std::make_shared<CountingOutput>(bytes, pattern, element_bytes, traffic_);
  }

 private:
  std::shared_ptr<Traffic> traffic_;
};

enum class Flip { none, dw, row };

// A CPU matmul impl whose outputs stay in CountingOutputs when `holds` and the runner allows it:
// its row output (y, or dx in the backward) at every invocation, dW after a layout's last. Flips
// on purpose: `dw`, every second layout execution that computes dW has dW's last element's lowest
// bit flipped (the last part of the output, far from the first); `row`, in the invocations of
// padded and micro-batched layouts, logical rows 7 and 10 have one bit flipped.
class Held : public Impl {
 public:
  static constexpr std::int64_t planted_rows[] = {7, 10};
  Held(Impl& inner, bool holds, Flip flip, std::shared_ptr<Traffic> traffic)
      : Impl(renamed(inner.info(), holds, flip)),
        inner_(inner),
        holds_(holds),
        flip_(flip),
        traffic_(std::move(traffic)) {}
  void run(Batch& batch) override {
    inner_.run(batch);
    const std::string row_output = batch.spec->pass == Pass::forward ? "y" : "dx";
    Tensor& rows = batch.out(row_output);
    const std::int64_t slots = batch.slots();
    if (flip_ == Flip::row && slots != 1 && slots != batch.spec->rows) {
      for (std::int64_t s = 0; s < slots; ++s) {
        const std::int64_t row = batch.invocation->slot_rows[static_cast<std::size_t>(s)];
        if (row == planted_rows[0] || row == planted_rows[1]) {
          const std::int64_t at = s * rows.row_size() + 5;
          rows.set_bits(at, rows.bits(at) ^ 1u);
        }
      }
    }
    if (holds_ && batch.rows_stay_on_device)
      batch.device_outputs[row_output] =
          std::make_shared<CountingOutput>(std::move(rows), traffic_);
    if (batch.spec->pass != Pass::backward || !batch.reductions_wanted) return;
    if (batch.invocation_index + 1 < batch.invocation_count) return;
    Tensor& dw = batch.out("dw");
    if (flip_ == Flip::dw && ++layouts_ % 2 == 0)
      dw.set_bits(dw.numel() - 1, dw.bits(dw.numel() - 1) ^ 1u);
    if (holds_ && batch.reductions_stay_on_device)
      batch.device_outputs["dw"] = std::make_shared<CountingOutput>(std::move(dw), traffic_);
  }

 private:
  static ImplInfo renamed(ImplInfo info, bool holds, Flip flip) {
    const char* flips[] = {"-", "-flip-dw-", "-flip-row-"};
    info.name = std::string(holds ? "held" : "host") + flips[static_cast<int>(flip)] + info.name;
    return info;
  }
  Impl& inner_;
  bool holds_;
  Flip flip_;
  std::shared_ptr<Traffic> traffic_;
  int layouts_ = 0;
};

struct World {
  Registry registry;
  Contract contract;
  std::shared_ptr<Traffic> traffic = std::make_shared<Traffic>();
  World() {
    register_all(registry);
    for (const char* inner : {"cpu-fixed-order", "cpu-dw-tree-by-tokens", "cpu-split-k-by-rows"}) {
      Impl& impl = *registry.find_impl("matmul", inner);
      for (bool holds : {false, true})
        for (Flip flip : {Flip::none, Flip::dw, Flip::row})
          registry.add_impl("matmul", std::make_unique<Held>(impl, holds, flip, traffic));
    }
    contract = load_embedded_contract(registry);
  }
};

CaseSpec matmul_case(const std::string& impl, Pass pass, std::int64_t rows) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype = DType::bf16;
  spec.dtype_name = "bf16";
  spec.pass = pass;
  // dW of 64 x 512 fp32: 128 KiB, two of the runner's 64 KiB parts.
  spec.dims = {{"N", 64}, {"K", 512}};
  spec.rows = rows;
  spec.seed = 3;
  spec.alone_rows = 4;  // rows past the alone sample are compared against the batch layout
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

TEST_CASE("outputs left on the device: the host comparison's results, fewer bytes moved",
          "[device_outputs]") {
  World world;
  Runner runner(world.registry, world.contract);
  constexpr std::int64_t rows = 11;
  const std::uint64_t dw_bytes = 64 * 512 * sizeof(float);
  for (const std::string inner :
       {"cpu-fixed-order", "cpu-dw-tree-by-tokens", "cpu-split-k-by-rows"}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      for (const std::string flip : {"-", "-flip-dw-", "-flip-row-"}) {
        if (flip == "-flip-dw-" && pass == Pass::forward) continue;
        INFO(inner << " " << to_string(pass) << " " << flip);
        const CaseResult host = runner.run_case(matmul_case("host" + flip + inner, pass, rows));
        *world.traffic = {};
        const CaseResult held = runner.run_case(matmul_case("held" + flip + inner, pass, rows));
        REQUIRE(host.verdict != Verdict::error);
        REQUIRE(held.verdict != Verdict::error);
        CHECK(findings(held) == findings(host));
        CHECK(held.fingerprint == host.fingerprint);
        // Every comparison of a layout that is not canonical, and of the repeats, ran on the
        // "device": each of its comparisons read both sides there.
        CHECK(world.traffic->comparisons > 0);
        CHECK(held.timings.profile[Phase::device_comparisons].bytes > 0);
        CHECK(host.timings.profile[Phase::device_comparisons].bytes == 0);
        // What came to the host: the canonical layouts' rows (alone and batch, whole) and the
        // batch layout's dW, and where something differs, its rows or its dW.
        const std::uint64_t row_bytes = (pass == Pass::forward ? 64 : 512) * 2;
        const std::uint64_t canonical =
            2 * rows * row_bytes + (pass == Pass::backward ? dw_bytes : 0);
        const bool clean =
            flip == "-" && (inner == "cpu-fixed-order" ||
                            (inner == "cpu-dw-tree-by-tokens" && pass == Pass::forward));
        if (clean) {
          CHECK(held.verdict == Verdict::pass);
          CHECK(world.traffic->bytes_read == canonical);
        } else if (flip == "-flip-row-" && inner != "cpu-split-k-by-rows") {
          CHECK(held.verdict != Verdict::pass);
          // The flipped rows, not the layouts: at most two rows of each layout compared.
          CHECK(world.traffic->bytes_read > canonical);
          CHECK(world.traffic->bytes_read <=
                canonical + 2 * 5 * row_bytes + (pass == Pass::backward ? 5 * dw_bytes : 0));
        }
        if (flip == "-flip-dw-") {
          // The batch layout's repeat differs in dW's last element: found on the device.
          REQUIRE(held.nondeterminism.size() == 1);
          CHECK(held.nondeterminism[0].layout == "batch repeat 2");
          for (const DriftMetrics& repeat : held.nondeterminism) {
            CHECK(repeat.tensor == "dw");
            CHECK(repeat.mismatch_count == 1);
            REQUIRE(repeat.first_mismatch.has_value());
            CHECK(repeat.first_mismatch->row == 63);
            CHECK(repeat.first_mismatch->column == 511);
          }
        }
        if (flip == "-flip-row-" && inner != "cpu-split-k-by-rows") {
          // (the split-K control drifts in rows of its own as well)
          bool found = false;
          for (const DriftMetrics& drift : held.drift) {
            if (drift.tensor != (pass == Pass::forward ? "y" : "dx")) continue;
            found = true;
            REQUIRE(drift.first_mismatch.has_value());
            CHECK((drift.first_mismatch->row == 7 || drift.first_mismatch->row == 10));
          }
          CHECK(found);
        }
      }
    }
  }
}

TEST_CASE("outputs left on the device by a layout that is dumped come to the host",
          "[device_outputs]") {
  World world;
  Runner runner(world.registry, world.contract);
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseArtifacts artifacts, host_artifacts;
    const CaseResult held =
        runner.run_case(matmul_case("held-cpu-fixed-order", pass, 5), &artifacts);
    REQUIRE(held.verdict == Verdict::pass);
    runner.run_case(matmul_case("host-cpu-fixed-order", pass, 5), &host_artifacts);
    for (const auto& [layout, outputs] : host_artifacts.layout_outputs) {
      INFO(layout);
      REQUIRE(artifacts.layout_outputs.count(layout));
      for (const auto& [name, tensor] : outputs) {
        REQUIRE(artifacts.layout_outputs.at(layout).count(name));
        CHECK(artifacts.layout_outputs.at(layout).at(name).bitwise_equal(tensor));
      }
    }
  }
}
