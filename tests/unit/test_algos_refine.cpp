// `bitcheck algos --refine` host logic on synthetic measurements: which pieces take the
// heuristic's pick, the refined entry (one bucket per piece, adjacent ones of one kernel merged,
// coverage of every M from 1), the M values verified, and the reports.
#include <algorithm>
#include <catch2/catch.hpp>

#include "tuner/refine.h"
#include "tuner/search.h"

using namespace bitcheck;

namespace {

nlohmann::json config(int tile, std::int64_t workspace = 0) {
  return {{"algo_id", 66},
          {"tile_id", tile},
          {"stages_id", 35},
          {"splitk_num", 1},
          {"reduction_scheme", 0},
          {"cta_swizzling", 0},
          {"custom_option", 0},
          {"cluster_shape_id", 1},
          {"inner_shape_id", 0},
          {"workspace_bytes", workspace},
          {"describe", "tile " + std::to_string(tile) + " workspace=" + std::to_string(workspace)}};
}

RefinePiece piece(std::int64_t low, std::int64_t high, std::size_t bucket,
                  std::optional<std::size_t> segment, PieceStatus status) {
  RefinePiece p;
  p.min_rows = low;
  p.max_rows = high;
  p.bucket = bucket;
  p.segment = segment;
  p.status = status;
  return p;
}

void timed(RefinePiece& p, std::vector<double> table_us, std::vector<double> pick_us) {
  p.status = PieceStatus::timed;
  for (std::size_t i = 0; i < table_us.size(); ++i) p.timed_rows.push_back(p.min_rows + i);
  p.table_us = std::move(table_us);
  p.heuristic_us = std::move(pick_us);
}

// Base table: [1,100] tile 1, [101,inf) tile 2. Heuristic segments up to M = 300:
// [1,50] tile 3, [51,200] tile 2 (workspace 4096 at some M), [201,300] tile 4.
RefineMeasurements measurements() {
  RefineMeasurements m;
  m.request.n = 64;
  m.request.k = 128;
  m.request.scan_rows = 300;
  m.request.verify_all_rows = 64;
  m.base_entry = {{"key",
                   {{"arch", "sm_90"},
                    {"cublaslt_version", 130100},
                    {"dtype", "bf16"},
                    {"form", "forward"},
                    {"N", 64},
                    {"K", 128}}},
                  {"buckets",
                   {{{"min_rows", 1}, {"max_rows", 100}, {"config", config(1)}},
                    {{"min_rows", 101}, {"config", config(2)}}}},
                  {"bit_class", {{"fingerprint", "0123456789abcdef"}}}};
  HeuristicSegment s0, s1, s2;
  s0 = {1, 50, config(3), "tile 3", 1};
  s1 = {51, 200, config(2, 4096), "tile 2", 1};
  s2 = {201, 300, config(4), "tile 4", 1};
  m.segments = {s0, s1, s2};
  m.pieces = {piece(1, 50, 0, 0, PieceStatus::timed), piece(51, 100, 0, 1, PieceStatus::timed),
              piece(101, 200, 1, 1, PieceStatus::same),
              piece(201, 300, 1, 2, PieceStatus::other_bits),
              piece(301, 0, 1, std::nullopt, PieceStatus::past_scan)};
  timed(m.pieces[0], {10, 10, 10}, {10, 9, 10});     // the pick is faster at one M: taken
  timed(m.pieces[1], {10, 10, 10}, {10.4, 11, 12});  // the table 4 % faster or more: kept
  m.device = {{"gpu_name", "test"}, {"arch", "sm_90"}, {"cublaslt_version", 130100}};
  return m;
}

}  // namespace

TEST_CASE("a piece takes the heuristic's pick only when timed and faster at some M", "[algos]") {
  RefineMeasurements m = measurements();
  CHECK(piece_takes_heuristic(m.pieces[0]));
  CHECK_FALSE(piece_takes_heuristic(m.pieces[1]));  // the table 3 % faster at every timed M
  RefinePiece close = m.pieces[1];
  close.heuristic_us = {10.2, 11, 12};  // 2 % at one M: inside the margin, the default's own kernel
  CHECK(piece_takes_heuristic(close));
  CHECK_FALSE(piece_takes_heuristic(m.pieces[2]));  // same kernel
  CHECK_FALSE(piece_takes_heuristic(m.pieces[3]));  // other bits: never, whatever the time
  m.pieces[3].timed_rows = {201};
  m.pieces[3].table_us = {10};
  m.pieces[3].heuristic_us = {1};
  CHECK_FALSE(piece_takes_heuristic(m.pieces[3]));
  RefinePiece broken = m.pieces[0];
  broken.heuristic_us.pop_back();  // timings that do not line up count for nothing
  CHECK_FALSE(piece_takes_heuristic(broken));
  for (PieceStatus status :
       {PieceStatus::splits_k, PieceStatus::rejected, PieceStatus::past_scan}) {
    RefinePiece p = m.pieces[0];
    p.status = status;
    CHECK_FALSE(piece_takes_heuristic(p));
  }
  // In the class but not timed (budget): the pick, which is the library default itself there.
  RefinePiece untimed = piece(1, 50, 0, 0, PieceStatus::not_timed);
  CHECK(piece_takes_heuristic(untimed));
}

TEST_CASE("the refined entry has one bucket per piece choice, merged, covering every M",
          "[algos]") {
  const RefineMeasurements m = measurements();
  const nlohmann::json entry = refined_pin_entry(m);
  const auto& buckets = entry.at("buckets");
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0]["min_rows"] == 1);
  CHECK(buckets[0]["max_rows"] == 50);
  CHECK(buckets[0]["config"]["tile_id"] == 3);  // the heuristic's pick
  CHECK(buckets[1]["min_rows"] == 51);
  CHECK(buckets[1]["max_rows"] == 100);
  CHECK(buckets[1]["config"]["tile_id"] == 1);  // the table stayed
  CHECK(buckets[2]["min_rows"] == 101);
  CHECK_FALSE(buckets[2].contains("max_rows"));  // [101, inf): three pieces of tile 2 merged
  CHECK(buckets[2]["config"]["tile_id"] == 2);
  CHECK(entry["key"] == m.base_entry["key"]);
  CHECK(entry["bit_class"]["fingerprint"] == "0123456789abcdef");
  CHECK(entry["bit_class"]["refined"]["pieces_taken"] == 1);
  CHECK(entry["bit_class"]["refined"]["heuristic_segments"] == 3);
  std::vector<RowBucket> ranges;
  for (const auto& b : buckets)
    ranges.push_back({b["min_rows"], b.value("max_rows", std::int64_t(0))});
  CHECK(bucket_coverage_problem(ranges) == std::nullopt);
}

TEST_CASE("merging a piece of one kernel keeps the larger workspace", "[algos]") {
  RefineMeasurements m = measurements();
  // The [101,200] piece now takes the heuristic's pick of tile 2 (workspace 4096).
  m.pieces[2].status = PieceStatus::timed;
  timed(m.pieces[2], {10}, {9});
  const nlohmann::json entry = refined_pin_entry(m);
  REQUIRE(entry["buckets"].size() == 3);
  CHECK(entry["buckets"][2]["config"]["workspace_bytes"] == 4096);
  CHECK(entry["buckets"][2]["config"]["describe"] == "tile 2 workspace=4096");
}

TEST_CASE("pieces with a gap or without the unbounded end make no entry", "[algos]") {
  RefineMeasurements gap = measurements();
  gap.pieces.erase(gap.pieces.begin() + 1);
  CHECK_THROWS_WITH(refined_pin_entry(gap), Catch::Contains("does not start at M=51"));
  RefineMeasurements open_end = measurements();
  open_end.pieces.pop_back();
  CHECK_THROWS_WITH(refined_pin_entry(open_end), Catch::Contains("end at M=300"));
}

TEST_CASE("verification runs every M up to the limit and both edges of every bucket", "[algos]") {
  const RefineMeasurements m = measurements();
  const nlohmann::json entry = refined_pin_entry(m);
  const std::vector<std::int64_t> rows = verification_rows(m, entry);
  for (std::int64_t r = 1; r <= 64; ++r) CHECK(std::count(rows.begin(), rows.end(), r) == 1);
  for (std::int64_t r : {100, 101, 300}) CHECK(std::count(rows.begin(), rows.end(), r) == 1);
  CHECK(std::count(rows.begin(), rows.end(), 65) == 0);
  CHECK(rows.back() == 300);  // the unbounded bucket is verified up to the scan
  CHECK(std::is_sorted(rows.begin(), rows.end()));
}

TEST_CASE("the refine report names each piece's status and the verification result", "[algos]") {
  const RefineMeasurements m = measurements();
  const nlohmann::json entry = refined_pin_entry(m);
  PinVerification passed;
  passed.rows = verification_rows(m, entry);
  passed.rows_compared = 12345;
  const std::string md = refine_report_markdown(m, entry, passed);
  CHECK_THAT(md, Catch::Contains("| [1,50] | **pick** | 1:1.000 2:0.900 3:1.000 | c0 | c1 |"));
  CHECK_THAT(md, Catch::Contains("| [51,100] | timed | 51:1.040 52:1.100 53:1.200 | c0 | c2 |"));
  CHECK_THAT(md, Catch::Contains("| [201,300] | other_bits |"));
  CHECK_THAT(md, Catch::Contains("| c1 | tile 3 |"));
  CHECK(md.find("| [101,200] |") == std::string::npos);  // same kernel: counted, not listed
  CHECK_THAT(md, Catch::Contains("all identical"));
  CHECK_THAT(md, Catch::Contains("1 take the heuristic's pick (50 of the scanned M)"));
  PinVerification failed = passed;
  failed.mismatch = "row 3 at M=77 differs";
  CHECK_THAT(refine_report_markdown(m, entry, failed),
             Catch::Contains("**FAILED**: row 3 at M=77"));
  const nlohmann::json json = refine_report_json(m, entry, failed);
  CHECK(json["verification"]["passed"] == false);
  CHECK(json["pieces"].size() == 5);
  CHECK(json["pieces"][0]["takes_heuristic"] == true);
  CHECK(json["pieces"][0]["timings"][1] == nlohmann::json({2, 10.0, 9.0}));
  CHECK(json["configs"][json["pieces"][0]["heuristic"].get<std::size_t>()] == "tile 3");
  CHECK(json["heuristic_segments"][2] ==
        nlohmann::json({201, 300, json["pieces"][3]["heuristic"]}));
  CHECK(json["refined"]["buckets"] == 3);
}

TEST_CASE("where the heuristic splits K, a searched in-class configuration replaces the table",
          "[algos]") {
  RefineMeasurements m = measurements();
  // [201,300]: the heuristic splits K there; a listed split-K-1 configuration of the class won.
  m.pieces[3].status = PieceStatus::splits_k;
  m.pieces[3].timed_rows = {201, 245, 300};
  m.pieces[3].table_us = {10, 10, 10};
  m.pieces[3].heuristic_us = {8, 8, 8};
  m.pieces[3].searched_us = {9, 9, 9};
  m.pieces[3].searched_candidates = 5;
  m.pieces[3].searched_config = config(5);
  m.pieces[3].searched_describe = "tile 5";
  CHECK_FALSE(piece_takes_heuristic(m.pieces[3]));
  const nlohmann::json entry = refined_pin_entry(m);
  REQUIRE(entry["buckets"].size() == 5);
  CHECK(entry["buckets"][3]["min_rows"] == 201);
  CHECK(entry["buckets"][3]["max_rows"] == 300);
  CHECK(entry["buckets"][3]["config"]["tile_id"] == 5);
  CHECK(entry["buckets"][4]["config"]["tile_id"] == 2);  // past the scan: the table
  CHECK(entry["bit_class"]["refined"]["split_k_pieces_searched"] == 1);
  PinVerification passed;
  const std::string md = refine_report_markdown(m, entry, passed);
  CHECK_THAT(
      md,
      Catch::Contains(
          "| [201,300] | splits_k, **searched** | 201:0.889 245:0.889 300:0.889 | c3 | c4 | c5 |"));
  const nlohmann::json json = refine_report_json(m, entry, passed);
  CHECK(json["pieces"][3]["timings"][0] == nlohmann::json({201, 10.0, 8.0, 9.0}));
  CHECK(json["configs"][json["pieces"][3]["searched"].get<std::size_t>()] == "tile 5");
}
