// Fault isolation and the device-memory limit, host side: the footprint estimate and the skip
// decision (a case that fits runs, one that does not is skipped with the sizes), the case
// description that travels to the worker, the result of a case that could not report, signal names,
// whether shards share the GPU.
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>

#include "core/json_input.h"
#include "report/report.h"
#include "run/device_memory.h"
#include "sweep/isolation.h"
#include "sweep/repro.h"
#include "unit/case_support.h"

using namespace bitcheck;
using case_support::make_case;
using case_support::world;
using nlohmann::json;

namespace {
constexpr std::size_t gib = std::size_t(1) << 30;

std::vector<TensorDecl> matmul_tensors(Pass pass, std::int64_t n, std::int64_t k) {
  CaseSpec spec =
      make_case("matmul", "cpu-fixed-order", DType::bf16, pass, {{"N", n}, {"K", k}}, 1, 1);
  return world().registry.find_op("matmul")->tensors(spec);
}
}  // namespace

TEST_CASE("device footprint: every tensor at the case's rows, plus workspace",
          "[unit][isolation][memory]") {
  // Forward: x[7,128] + w[64,128] + y[7,64], bf16.
  CHECK(device_footprint_bytes(matmul_tensors(Pass::forward, 64, 128), 7) ==
        (7 * 128 + 64 * 128 + 7 * 64) * 2u);
  // Backward adds dy[7,64] and dx[7,128] in bf16 and the fp32 dw[64,128] accumulator.
  CHECK(device_footprint_bytes(matmul_tensors(Pass::backward, 64, 128), 7, 1000) ==
        (7 * 128 + 64 * 128 + 7 * 64 + 7 * 128) * 2u + 64 * 128 * 4u + 1000u);
  // A shape no GPU holds: the weight alone is 2 TiB; nothing wraps around.
  CHECK(device_footprint_bytes(matmul_tensors(Pass::forward, 1 << 20, 1 << 20), 1 << 16) >
        std::size_t(2048) * gib);
  TensorDecl absurd{
      "w", TensorRole::parameter, DType::fp32, {std::int64_t(1) << 40, std::int64_t(1) << 40}};
  CHECK(device_footprint_bytes({absurd}, 1) == SIZE_MAX);
}

TEST_CASE("device memory: a case that fits runs, one that does not is skipped with the sizes",
          "[unit][isolation][memory]") {
  const std::size_t free_bytes = 80 * gib;
  const std::size_t margin = device_memory_margin(free_bytes);
  CHECK(margin == 512 * (std::size_t(1) << 20) + 5 * gib);
  CHECK_FALSE(device_memory_shortfall(1 * gib, free_bytes));  // control: the check lets cases run
  CHECK_FALSE(device_memory_shortfall(free_bytes - margin, free_bytes));
  auto just_over = device_memory_shortfall(free_bytes - margin + 1, free_bytes);
  REQUIRE(just_over);
  auto too_large = device_memory_shortfall(100 * gib, free_bytes);
  REQUIRE(too_large);
  CHECK(*too_large == "needs ~100.0 GiB of device memory, 80.0 GiB free (5.5 GiB kept as margin)");
  CHECK(device_memory_shortfall(SIZE_MAX, free_bytes));
}

TEST_CASE(
    "host memory: a CPU case too large for the host is skipped with its size, a small one runs",
    "[unit][isolation][memory]") {
  const Registry& registry = world().registry;
  const OpDef& matmul = *registry.find_op("matmul");
  const Impl& cpu = *registry.find_impl("matmul", "cpu-fixed-order");
  REQUIRE(host_available_memory_bytes());
  CaseSpec huge = make_case("matmul", "cpu-fixed-order", DType::bf16, Pass::forward,
                            {{"N", 1 << 20}, {"K", 1 << 20}}, 1 << 16, 1);
  auto reason = device_memory_skip_reason(registry, matmul, cpu, huge);
  REQUIRE(reason);
  CHECK_THAT(*reason, Catch::StartsWith("needs ~") && Catch::Contains("GiB of host memory") &&
                          Catch::Contains("GiB free"));
  CaseSpec small = make_case("matmul", "cpu-fixed-order", DType::bf16, Pass::forward,
                             {{"N", 64}, {"K", 64}}, 8, 1);
  CHECK_FALSE(device_memory_skip_reason(registry, matmul, cpu, small));  // control
}

TEST_CASE("a case travels to the worker and back unchanged", "[unit][isolation]") {
  CaseSpec spec =
      make_case("rmsnorm", "cpu-fixed-order", DType::fp16, Pass::backward, {{"H", 256}}, 33, 9);
  spec.layouts = {"alone", "pad_left"};
  spec.repeats = 3;
  spec.alone_rows = 5;
  spec.index = 42;
  CaseResult description;
  description.spec = spec;
  json sent = case_to_json(description);
  CaseSpec received = case_spec_from_json(JsonCursor(sent, "test"));
  CHECK(received.id() == spec.id());
  CHECK(received.dtype == DType::fp16);
  CHECK(received.layouts == spec.layouts);
  CHECK(received.repeats == 3);
  CHECK(received.alone_rows == 5);
  CHECK(received.index == 42);
}

TEST_CASE("a case checked in process: a CPU case never asks for a CUDA fault",
          "[unit][isolation]") {
  Runner runner(world().registry, world().contract);
  CaseSpec spec =
      make_case("rmsnorm", "cpu-fixed-order", DType::bf16, Pass::forward, {{"H", 64}}, 3, 1);
  CheckedCase checked = run_case_checked(runner, world().registry, spec);
  CHECK_FALSE(checked.context_fault);
  const json result = case_to_json(checked.result);
  CHECK(result["id"] == spec.id());
  CHECK(result["verdict"] == "pass");
}

TEST_CASE("a case that could not report is an error with the reason", "[unit][isolation]") {
  CaseSpec spec = make_case("matmul", "cpu-split-k-by-rows", DType::bf16, Pass::forward,
                            {{"N", 64}, {"K", 128}}, 7, 1);
  json failed = case_to_json(
      failed_case(world().registry, spec, "the worker process running this case was killed", 1.5));
  CHECK(failed["verdict"] == "error");
  CHECK(failed["reason"] == "the worker process running this case was killed");
  CHECK(failed["backend"] == "cpu");
  CHECK(failed["control"] == true);
  CHECK(failed["timings"]["total_seconds"] == 1.5);
  CHECK(outcome_from_json(failed).verdict == Verdict::error);
}

TEST_CASE("signal names", "[unit][isolation]") {
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGABRT) == "SIGABRT");
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(63) == "signal 63");
}

TEST_CASE("a GPU is shared by shards only when BITCHECK_SHARDS_ON_DEVICE counts more than one",
          "[isolation]") {
  unsetenv("BITCHECK_SHARDS_ON_DEVICE");
  CHECK_FALSE(device_shared_by_shards());
  for (const char* value : {"1", "0", "two", "16x", ""}) {
    INFO(value);
    setenv("BITCHECK_SHARDS_ON_DEVICE", value, 1);
    CHECK_FALSE(device_shared_by_shards());
  }
  for (const char* value : {"2", "16"}) {
    INFO(value);
    setenv("BITCHECK_SHARDS_ON_DEVICE", value, 1);
    CHECK(device_shared_by_shards());
  }
  unsetenv("BITCHECK_SHARDS_ON_DEVICE");
}
