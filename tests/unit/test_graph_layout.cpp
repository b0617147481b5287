// The graph layout's logic on the host: the layout itself, its skip with the reason (the CPU
// backend, an impl that cannot be captured, a capture that fails at run time), a capture control
// that drifts only there, and the skipped layouts in the case's report entry.
#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "case_support.h"
#include "core/error.h"
#include "core/json_input.h"
#include "report/case_json.h"

using namespace bitcheck;
using case_support::describe;
using case_support::world;

namespace {

// A device backend with no device behind it: enough for the runner to treat its impls as device
// impls (the graph layout is theirs to capture).
class HostStandInDevice : public DeviceBackend {
 public:
  nlohmann::json meta() const override { return nlohmann::json::object(); }
  double copy_bandwidth_gbps() const override { return -1; }
  double copy_bandwidth_gbps(double, int, int, std::size_t) const override { return -1; }
  std::optional<std::size_t> free_memory_bytes() const override { return std::nullopt; }
  std::optional<std::string> context_fault() const override { return std::nullopt; }
};

const char* const device_backend = "host-device";

enum class UnderCapture {
  same,         // computes the same bits captured or not
  scaled,       // a path chosen under capture: its outputs differ from eager ones
  unsupported,  // throws CaptureUnsupported when captured
};

// matmul summing K in index order per row, on the stand-in device.
class DeviceMatmul : public Impl {
 public:
  DeviceMatmul(ImplInfo info, UnderCapture under_capture)
      : Impl(std::move(info)), under_capture_(under_capture) {}
  void run(Batch& batch) override {
    if (batch.captured) captured_calls++;
    if (batch.captured && under_capture_ == UnderCapture::unsupported)
      throw CaptureUnsupported("the test impl synchronizes under capture");
    const float scale = batch.captured && under_capture_ == UnderCapture::scaled ? 1.5f : 1.0f;
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    const Tensor& x = batch.in("x");
    const Tensor& w = batch.in("w");
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (std::int64_t c = 0; c < k; ++c) sum += x.get(s * k + c) * w.get(j * k + c);
        y.set(s * n + j, sum * scale);
      }
    }
  }
  int captured_calls = 0;

 private:
  UnderCapture under_capture_;
};

struct DeviceWorld {
  Registry registry;
  DeviceMatmul* capturable = nullptr;
  DeviceWorld() {
    registry.add_op(*world().registry.find_op("matmul"));
    registry.set_backend_status(device_backend, true, "");
    registry.set_device_backend(device_backend, std::make_unique<HostStandInDevice>());
    auto add = [&](ImplInfo info, UnderCapture under_capture) {
      auto impl = std::make_unique<DeviceMatmul>(info.only_passes({Pass::forward}), under_capture);
      DeviceMatmul* raw = impl.get();
      registry.add_impl("matmul", std::move(impl));
      return raw;
    };
    capturable =
        add(ImplInfo::invariant("capturable", device_backend, "index order").capturable_in_graphs(),
            UnderCapture::same);
    add(ImplInfo::invariant("eager-only", device_backend, "index order"), UnderCapture::same);
    add(ImplInfo::invariant("fails-capture", device_backend, "index order").capturable_in_graphs(),
        UnderCapture::unsupported);
    add(ImplInfo::control("path-by-capture", device_backend, "a path chosen under capture")
            .drifting_only_in_layout(graph_layout)
            .capturable_in_graphs(),
        UnderCapture::scaled);
  }
};

CaseSpec matmul_case(const std::string& impl, std::vector<std::string> layouts) {
  CaseSpec spec = case_support::make_case("matmul", impl, DType::fp32, Pass::forward,
                                          {{"N", 8}, {"K", 16}}, 5, 1);
  spec.layouts = std::move(layouts);
  return spec;
}

const std::vector<std::string> with_graph = {"alone", "batch", graph_layout};

// Why the case skipped the graph layout ("" when it did not).
std::string graph_skipped_because(const CaseResult& result) {
  auto skipped = result.skipped_layouts.find(graph_layout);
  return skipped == result.skipped_layouts.end() ? "" : skipped->second;
}

}  // namespace

TEST_CASE("the graph layout is the batch's one in-order invocation, captured", "[layout][graph]") {
  CaseSpec spec = matmul_case("cpu-fixed-order", {"alone", "graph"});
  CHECK(is_known_layout(graph_layout));
  const std::vector<std::string>& defaults = known_layouts();
  CHECK(std::find(defaults.begin(), defaults.end(), graph_layout) == defaults.end());
  Layout graph = make_layout(graph_layout, spec, select_alone_rows(spec), 1);
  Layout batch = make_layout("batch", spec, select_alone_rows(spec), 1);
  CHECK(graph.name == "graph");
  CHECK(graph.captured);
  CHECK_FALSE(batch.captured);
  CHECK(graph.covers_all_rows_in_order);
  REQUIRE(graph.invocations.size() == 1);
  CHECK(graph.invocations[0].slot_rows == batch.invocations[0].slot_rows);
}

TEST_CASE("the graph layout skips on the CPU backend with the reason, the case still passes",
          "[layout][graph]") {
  CaseResult result = case_support::run(matmul_case("cpu-fixed-order", with_graph));
  INFO(describe(result));
  CHECK(result.verdict == Verdict::pass);
  CHECK(result.layouts_run == std::vector<std::string>{"alone", "batch"});
  CHECK(graph_skipped_because(result) ==
        "the cpu backend has no device, so no CUDA graph to capture into");
  CHECK(result.paths.count(graph_layout) == 0);
}

TEST_CASE("a device impl runs the graph layout captured, compared with the eager canonical rows",
          "[layout][graph]") {
  DeviceWorld device;
  CaseResult result = case_support::run(matmul_case("capturable", with_graph), device.registry);
  INFO(describe(result));
  CHECK(result.verdict == Verdict::pass);
  CHECK(result.layouts_run == std::vector<std::string>{"alone", "batch", "graph"});
  CHECK(result.skipped_layouts.empty());
  CHECK(device.capturable->captured_calls == 1);  // only the graph layout's one invocation
}

TEST_CASE("a device impl that cannot be captured skips the graph layout, with the reason",
          "[layout][graph]") {
  DeviceWorld device;
  // Declared (ImplInfo::graph_capturable unset), and found only when captured (an impl from
  // outside whose capture fails): either way the other layouts run and pass.
  const std::pair<const char*, const char*> impls[] = {
      {"eager-only",
       "eager-only cannot be captured into a CUDA graph: its run() uploads, downloads or "
       "synchronizes between its launches"},
      {"fails-capture", "the test impl synchronizes under capture"}};
  for (const auto& [impl, reason] : impls) {
    CaseResult result = case_support::run(matmul_case(impl, with_graph), device.registry);
    INFO(impl << ": " << describe(result));
    CHECK(result.verdict == Verdict::pass);
    CHECK(result.layouts_run == std::vector<std::string>{"alone", "batch"});
    CHECK(graph_skipped_because(result) == reason);
    CHECK(result.paths.count(graph_layout) == 0);
  }
}

TEST_CASE("a capture control drifts in the graph layout, and is expected to only where it runs",
          "[layout][graph][control]") {
  DeviceWorld device;
  CaseResult captured =
      case_support::run(matmul_case("path-by-capture", with_graph), device.registry);
  INFO(describe(captured));
  CHECK(captured.verdict == Verdict::drift);
  CHECK(captured.expected_to_drift);
  REQUIRE_FALSE(captured.drift.empty());
  for (const DriftMetrics& drift : captured.drift) CHECK(drift.layout == graph_layout);
  // Without the graph layout it had no chance: it passes, and no one expects it to drift.
  CaseResult eager =
      case_support::run(matmul_case("path-by-capture", {"alone", "batch"}), device.registry);
  INFO(describe(eager));
  CHECK(eager.verdict == Verdict::pass);
  CHECK_FALSE(eager.expected_to_drift);
}

TEST_CASE("a case's skipped layouts survive its report entry", "[layout][graph][report]") {
  CaseResult result = case_support::run(matmul_case("cpu-fixed-order", with_graph));
  REQUIRE(result.verdict == Verdict::pass);
  const nlohmann::json entry = case_to_json(result);
  REQUIRE(entry.contains("skipped_layouts"));
  CHECK(entry["skipped_layouts"][graph_layout] == result.skipped_layouts.at(graph_layout));
  CaseResult read = case_from_json(JsonCursor(entry, "test"));
  CHECK(read.skipped_layouts == result.skipped_layouts);
  CHECK(case_to_json(read) == entry);
  CaseResult without = case_support::run(matmul_case("cpu-fixed-order", {"alone", "batch"}));
  CHECK_FALSE(case_to_json(without).contains("skipped_layouts"));
}
