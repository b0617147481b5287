// Bucketed cuBLASLt pins on the GPU: `bitcheck algos` finds a table for a shape, and the pinned
// impl loading that table gives identical rows whatever M (bucket) a row is computed in, through
// the runner's layouts; the control mixes two bit-classes in one table and must drift. Also: every
// bucketed pin committed for this device passes the same check.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "common/runtime.h"
#include "core/json_input.h"
#include "matmul/pin_table.h"
#include "tuner/search.h"
#include "unit/case_support.h"

using namespace bitcheck;

namespace {

const std::int64_t kN = 1024, kK = 4096;

// The tested M values, which are also the bucket edges.
AlgosRequest small_request() {
  AlgosRequest request;
  request.n = kN;
  request.k = kK;
  request.rows = {1, 7, 17, 33, 49, 65, 97, 129, 193, 257, 321, 385, 513, 769, 1025, 2049, 4097};
  request.max_candidates = 48;
  request.budget_seconds = 20;
  request.repeats = 5;
  request.progress = false;
  return request;
}

// Runs the pinned impl's forward case (alone = M 1, batch = M rows, micro-batches and paddings of
// other M) with `pins` as the pin table.
CaseResult run_with_pins(const nlohmann::json& pins, std::int64_t rows) {
  const std::string path = "/tmp/bitcheck-gpu-bucketed-pins.json";
  std::ofstream(path) << pins.dump(2);
  cuda::PinTable::instance().configure(path, false);
  CaseSpec spec = case_support::make_case("matmul", "cublaslt-pinned", DType::bf16, Pass::forward,
                                          {{"N", kN}, {"K", kK}}, rows, 7);
  CaseResult result = case_support::run(spec);
  cuda::PinTable::instance().configure("contract/pins", false);
  std::remove(path.c_str());
  return result;
}

nlohmann::json pin_document(const nlohmann::json& entry) {
  return {{"schema_version", 1}, {"pins", nlohmann::json::array({entry})}};
}

}  // namespace

TEST_CASE(
    "a bucketed pin table from bitcheck algos gives identical rows across M - a mixed one drifts",
    "[gpu][matmul][algos]") {
  AlgosRequest request = small_request();
  std::sort(request.rows.begin(), request.rows.end());
  AlgoMeasurements measurements = measure_cublaslt_algos(request);
  AlgoAnalysis analysis = analyze_algos(measurements, buckets_from_rows(request.rows));
  INFO(algos_terminal_table(measurements, analysis));
  REQUIRE(analysis.best);
  const nlohmann::json entry = algos_pin_entry(measurements, analysis);
  // One bucket per tested M at most (adjacent buckets of one configuration are merged), and
  // together they cover every M.
  REQUIRE(entry["buckets"].size() >= 1);
  REQUIRE(entry["buckets"].size() <= request.rows.size());
  CHECK(entry["buckets"].front()["min_rows"] == 1);
  CHECK(entry["buckets"].back().value("max_rows", std::int64_t(0)) == 0);
  const std::int64_t first_max = entry["buckets"].front().value("max_rows", std::int64_t(0));
  REQUIRE(first_max > 0);  // the alone rows (M = 1) and the batch of 300 use different buckets
  REQUIRE(first_max < 300);

  // Rows computed alone (M = 1), in a batch of 300 and in micro-batches: several buckets.
  CaseResult result = run_with_pins(pin_document(entry), 300);
  INFO(case_support::describe(result));
  CHECK(result.verdict == Verdict::pass);
  REQUIRE(result.impl_config["cublaslt"]["forward"].contains("table"));
  CHECK(result.impl_config["cublaslt"]["forward"]["table"]["buckets"] == entry["buckets"].size());
  CHECK(result.impl_config["cublaslt"]["forward"]["bit_class"]["fingerprint"] ==
        analysis.classes[*analysis.best].fingerprint);

  // Control: the first bucket (M = 1 up to first_max) from a candidate outside the best class
  // (different bits by the measurement), the rest from the table. Rows computed alone must then
  // differ.
  const auto& best_members = analysis.classes[*analysis.best].members;
  std::optional<std::size_t> outsider;
  for (std::size_t i = 0; i < measurements.candidates.size() && !outsider; ++i) {
    const auto& candidate = measurements.candidates[i];
    const bool in_best =
        std::find(best_members.begin(), best_members.end(), i) != best_members.end();
    const bool usable = analysis.verdicts[i].status == CandidateStatus::usable;
    bool runs_in_first_bucket = true;  // accepted at every checked M of the first bucket
    for (std::int64_t rows : measurements.checked_rows) {
      if (rows <= first_max &&
          std::find(candidate.accepted_rows.begin(), candidate.accepted_rows.end(), rows) ==
              candidate.accepted_rows.end()) {
        runs_in_first_bucket = false;
      }
    }
    if (!in_best && usable && runs_in_first_bucket) outsider = i;
  }
  REQUIRE(outsider);  // split-K counts give other classes on this shape
  nlohmann::json mixed = entry;
  mixed["buckets"][0]["config"] = measurements.candidates[*outsider].config;
  CaseResult control = run_with_pins(pin_document(mixed), 300);
  INFO("control: " << case_support::describe(control));
  CHECK(control.verdict == Verdict::drift);
}

TEST_CASE("every bucketed pin committed for this device gives identical rows across M",
          "[gpu][matmul][algos]") {
  const cuda::DeviceInfo device = cuda::query_device();
  REQUIRE(device.available);
  // Relative to the working directory, as the sweep reads it (gpu-check.sh runs in the bundle).
  const std::string path = "contract/pins";
  cuda::PinTable::instance().configure(path, false);
  int checked = 0;
  for (const auto& entry : cuda::read_pin_entries(path)) {
    if (entry.buckets.empty() || entry.key.arch != device.arch() ||
        entry.key.cublaslt_version != device.cublaslt_version || entry.key.form != "forward") {
      continue;
    }
    CaseSpec spec =
        case_support::make_case("matmul", "cublaslt-pinned", *parse_dtype(entry.key.dtype),
                                Pass::forward, {{"N", entry.key.n}, {"K", entry.key.k}}, 300, 7);
    spec.alone_rows = 8;
    CaseResult result = case_support::run(spec);
    INFO(entry.key.to_json().dump() << ": " << case_support::describe(result));
    CHECK(result.verdict == Verdict::pass);
    ++checked;
  }
  WARN(checked << " committed bucketed pins checked for " << device.arch() << ", cuBLASLt "
               << device.cublaslt_version);
}

TEST_CASE("lm_head's pinned GEMM takes its bucket from a bucketed pin of the same key",
          "[gpu][lm_head][algos]") {
  // lm_head at V = 128256, H = 4096 shares the key of the matmul N = 128256, K = 4096, which is a
  // bucketed pin for the H200: each M must run its bucket's configuration (a bucketed entry's
  // single config names no algorithm and is refused).
  cuda::PinTable::instance().configure("contract/pins", false);
  const cuda::DeviceInfo device = cuda::query_device();
  const auto entry = cuda::PinTable::instance().lookup(
      cuda::PinKey{device.arch(), device.cublaslt_version, "bf16", "forward", 128256, 4096, 0},
      [] { return cuda::LtConfig{}; });
  if (entry->buckets.empty()) {
    WARN("no bucketed pin for (128256, 4096) on this device");
    return;
  }
  for (const std::int64_t rows : {33, 300}) {
    CaseSpec spec = case_support::make_case("lm_head", "cublaslt-pinned", DType::bf16,
                                            Pass::forward, {{"V", 128256}, {"H", 4096}}, rows, 7);
    spec.alone_rows = 4;
    CaseResult result = case_support::run(spec);
    INFO(case_support::describe(result));
    CHECK(result.verdict == Verdict::pass);
    const nlohmann::json& used = result.impl_config["gemm"]["forward"];
    CHECK(used["algo_id"].get<int>() >= 0);
    REQUIRE(used.contains("bucket"));
    CHECK(used["table"]["fingerprint"] == entry->table_fingerprint);
  }
}
