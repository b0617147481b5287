// Refined cuBLASLt pins on the GPU: verify_cublaslt_pin finds a bucket whose configuration gives
// other bits (the control, a split-K bucket planted in a committed table), every committed bucketed
// pin for this device verifies row for row at every M up to 512 and at every bucket edge, and
// `algos --refine` on a committed table makes a table that verifies.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "common/runtime.h"
#include "core/json_input.h"
#include "matmul/cublaslt_search.h"
#include "matmul/pin_table.h"
#include "tuner/refine.h"
#include "tuner/search.h"

using namespace bitcheck;

namespace {

const char* kPins = "contract/pins";

struct Committed {
  RefineRequest request;
  nlohmann::json entry;
};

// The committed bucketed forward pins for this device.
std::vector<Committed> committed_pins() {
  const cuda::DeviceInfo device = cuda::query_device();
  std::vector<Committed> result;
  for (const cuda::PinFile& file : cuda::read_pin_files(kPins)) {
    const auto entries = cuda::parse_pin_document(file.document, file.path);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const cuda::PinKey& key = entries[i].key;
      if (entries[i].buckets.empty() || key.arch != device.arch() ||
          key.cublaslt_version != device.cublaslt_version || key.form != "forward") {
        continue;
      }
      Committed c;
      c.request.dtype = key.dtype;
      c.request.form = key.form;
      c.request.n = key.n;
      c.request.k = key.k;
      c.request.progress = false;
      c.request.base_pin_file = kPins;
      c.entry = file.document["pins"][i];
      result.push_back(c);
    }
  }
  return result;
}

std::vector<std::int64_t> rows_to_verify(const nlohmann::json& entry, std::int64_t all_up_to,
                                         std::int64_t largest) {
  std::set<std::int64_t> rows;
  for (std::int64_t r = 1; r <= all_up_to; ++r) rows.insert(r);
  for (const auto& bucket : entry["buckets"]) {
    for (const char* edge : {"min_rows", "max_rows"}) {
      const std::int64_t m = bucket.value(edge, std::int64_t(0));
      if (m >= 1 && m <= largest) rows.insert(m);
    }
  }
  rows.insert(largest);
  return {rows.begin(), rows.end()};
}

}  // namespace

TEST_CASE("verify_cublaslt_pin finds a planted split-K bucket - committed tables verify",
          "[gpu][matmul][algos]") {
  const std::vector<Committed> pins = committed_pins();
  if (pins.empty()) {
    WARN("no committed bucketed pin for this device");
    return;
  }
  for (const Committed& pin : pins) {
    INFO(pin.entry["key"].dump());
    const std::vector<std::int64_t> rows = rows_to_verify(pin.entry, 512, 4096);
    const PinVerification check = verify_cublaslt_pin(pin.request, pin.entry, pin.entry, rows);
    CHECK_FALSE(check.mismatch.has_value());
    CHECK(check.rows.size() == rows.size());
    CHECK(check.rows_compared > 512 * 513 / 2);
  }
  // Control: the bucket holding M = 300 of the smallest table (N x K), split two ways in K. Its
  // bits must differ, and the difference must be found inside that bucket. (The smallest, not the
  // first file's: at vocabulary N a split K needs more workspace than the pinned impl gives.)
  const Committed& pin =
      *std::min_element(pins.begin(), pins.end(), [](const Committed& a, const Committed& b) {
        return a.request.n * a.request.k < b.request.n * b.request.k;
      });
  nlohmann::json planted = pin.entry;
  std::size_t index = 0;
  while (!(planted["buckets"][index]["min_rows"].get<std::int64_t>() <= 300 &&
           planted["buckets"][index].value("max_rows", std::int64_t(1) << 40) >= 300)) {
    ++index;
  }
  nlohmann::json& bucket = planted["buckets"][index];
  const cuda::PinEntry parsed =
      cuda::parse_pin_document({{"schema_version", 1}, {"pins", {pin.entry}}}, kPins).front();
  const cuda::LtConfig split = cuda::lt_with_split_k(parsed.buckets[index].config, 2);
  REQUIRE(cuda::lt_config_supports(split, cuda::LtGemmForm::forward, cuda::GemmDType::bf16, 300,
                                   pin.request.n, pin.request.k));
  bucket["config"] = cuda::lt_config_to_json(split);
  const PinVerification control =
      verify_cublaslt_pin(pin.request, planted, pin.entry, {1, 2, 300, 4096});
  INFO("planted in bucket " << index << ": " << split.describe());
  REQUIRE(control.mismatch.has_value());
  CHECK_THAT(*control.mismatch, Catch::Contains("at M=300 "));
}

TEST_CASE("algos --refine on a committed table follows the heuristic and verifies",
          "[gpu][matmul][algos]") {
  const std::vector<Committed> pins = committed_pins();
  if (pins.empty()) {
    WARN("no committed bucketed pin for this device");
    return;
  }
  RefineRequest request = pins.front().request;
  request.scan_rows = 1024;
  request.verify_all_rows = 256;
  request.budget_seconds = 20;
  request.repeats = 5;
  const RefineMeasurements m = measure_cublaslt_refine(request);
  REQUIRE_FALSE(m.segments.empty());
  CHECK(m.segments.front().min_rows == 1);
  CHECK(m.segments.back().max_rows == 1024);
  REQUIRE_FALSE(m.pieces.empty());
  CHECK(m.pieces.back().max_rows == 0);  // past the scan: the table's last bucket, unbounded
  const nlohmann::json refined = refined_pin_entry(m);
  const PinVerification check =
      verify_cublaslt_pin(request, refined, m.base_entry, verification_rows(m, refined));
  INFO(refine_report_markdown(m, refined, check));
  CHECK_FALSE(check.mismatch.has_value());
  CHECK(check.rows.back() == 1024);
  // A piece takes the heuristic's pick only where the pick is in the class (timed or not).
  for (const RefinePiece& piece : m.pieces) {
    if (piece_takes_heuristic(piece))
      CHECK((piece.status == PieceStatus::timed || piece.status == PieceStatus::not_timed));
  }
  WARN(m.segments.size() << " heuristic segments up to M=1024, " << m.pieces.size() << " pieces, "
                         << refined["buckets"].size() << " buckets after refinement (" << m.seconds
                         << " s, " << m.scan_seconds << " s of queries)");
}
