// `bitcheck algos --refine`: makes a committed bucketed pin table follow the cuBLASLt heuristic.
//
// A table from the search has one configuration per M bucket, so inside a bucket it can lose to
// the heuristic wherever the heuristic changes kernel (a 128x160 tile at M = 628, 128x224 at 877).
// The refinement asks the heuristic for its pick at every M from 1 to the scan limit, cuts the M
// axis where the pick changes (its segments), and intersects those with the table's buckets
// (pieces). A piece takes the heuristic's pick when the pick is split-K 1 and gives the table's
// bits (row fingerprints at both ends of its segment equal the table's), unless the table's own
// configuration, timed against it in the same run, was 3 % faster at every timed M of the piece.
// Where the pick is taken, the table runs what the library default runs. The refined table is then
// verified row for row against the table's own bits at every M up to 2048 and at both edges of
// every bucket; a table that fails is never written.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

// A maximal range of M where the heuristic's top pick is one kernel.
struct HeuristicSegment {
  std::int64_t min_rows = 1;
  std::int64_t max_rows = 1;
  nlohmann::json config;  // pin-file form; workspace_bytes the most any M of the range needs
  std::string describe;
  std::int32_t splitk = 1;
};

// Where the heuristic's pick stands against the table in one piece.
enum class PieceStatus {
  same,        // the table already runs the heuristic's pick here
  splits_k,    // the heuristic splits K here: another bit-class; the table stays, or the
               // fastest in-class configuration cuBLASLt lists at these M (searched_config)
  other_bits,  // the heuristic's pick gives other bits than the table (detail says where)
  rejected,    // cuBLASLt rejects the pick at an end of the piece, or it failed to run
  timed,       // both timed at the piece's M values (the choice is the host's)
  not_timed,   // in the class, not timed (budget spent): takes the pick, the default itself
  past_scan,   // beyond the scanned M: the table stays
};
std::string to_string(PieceStatus status);

// One range of M inside one table bucket and one heuristic segment.
struct RefinePiece {
  std::int64_t min_rows = 1;
  std::int64_t max_rows = 0;  // 0: unbounded (the part of the last bucket past the scan)
  std::size_t bucket = 0;     // index into the base table's buckets
  std::optional<std::size_t> segment;
  PieceStatus status = PieceStatus::same;
  std::string detail;
  std::vector<std::int64_t> timed_rows;  // the piece's ends and its geometric middle
  std::vector<double> table_us;          // per timed M: the table's configuration
  std::vector<double> heuristic_us;      // per timed M: the heuristic's pick
  // splits_k pieces: the fastest of the class's split-K-1 configurations cuBLASLt lists at the
  // piece's M (checked against the table's bits), when it beat the table by kKeepMargin at every
  // timed M; null otherwise. Its times per timed M, and how many candidates were in the class.
  nlohmann::json searched_config;
  std::string searched_describe;
  std::vector<double> searched_us;
  int searched_candidates = 0;
};

struct RefineRequest {
  std::string dtype = "bf16";
  std::string form = "forward";
  std::int64_t n = 0, k = 0;
  std::uint64_t seed = 1;
  std::int64_t scan_rows = 16384;       // the heuristic is asked at every M from 1 to this
  std::int64_t verify_all_rows = 2048;  // verification runs every M up to this
  double budget_seconds = 240;          // timing stops starting new pieces after this
  int split_k_candidates = 24;          // splits_k pieces: listed split-K-1 configurations tried
  int warmup = 3;
  int repeats = 20;
  bool progress = true;
  std::string base_pin_file;  // where the bucketed entry for this device and shape is read
};

struct RefineMeasurements {
  RefineRequest request;
  nlohmann::json base_entry;  // the entry refined, as read from the base pin file
  std::vector<HeuristicSegment> segments;
  std::vector<RefinePiece> pieces;  // in M order, covering every M from 1
  double scan_seconds = 0;          // the heuristic queries
  double seconds = 0;
  nlohmann::json device;
  std::vector<std::string> notes;
};

// The refined table's rows against the table it came from, on the same inputs.
struct PinVerification {
  std::vector<std::int64_t> rows;       // every M run
  std::int64_t rows_compared = 0;       // output rows compared, over all M
  std::optional<std::string> mismatch;  // the first row whose bits differ, and where
  double seconds = 0;
};

// Device side (with the CUDA backend; without_cuda.cpp throws without one). BadInput naming the
// pin file when it holds no bucketed entry for this device (arch, cuBLASLt version) and shape.
RefineMeasurements measure_cublaslt_refine(const RefineRequest& request);
// Runs `entry` (bucketed, pin-file form) at every M of `rows` on the request's inputs and compares
// every output row with `reference_entry` run at the largest M of `rows`.
PinVerification verify_cublaslt_pin(const RefineRequest& request, const nlohmann::json& entry,
                                    const nlohmann::json& reference_entry,
                                    const std::vector<std::int64_t>& rows);

// ---- host side ---------------------------------------------------------------------------------

// The table's configuration stays in a piece only when it was timed this much faster than the
// heuristic's pick at every timed M: the pick is the library default itself, so keeping the table
// on a win inside the timing noise would risk a loss against the default where nothing was gained.
constexpr double kKeepMargin = 1.03;
// Whether a piece takes the heuristic's pick: the pick is in the class (timed or not_timed) and the
// table was not timed kKeepMargin times faster at every timed M.
bool piece_takes_heuristic(const RefinePiece& piece);
// The refined pin-file entry: one bucket per piece (the chosen configuration), adjacent buckets of
// one kernel merged (workspace the larger); key and bit_class of the base, with a record of the
// refinement. Throws std::logic_error when the pieces do not cover every M from 1.
nlohmann::json refined_pin_entry(const RefineMeasurements& measurements);
// M values to verify: every M from 1 to verify_all_rows, both edges of every bucket of `entry`
// up to scan_rows, and scan_rows.
std::vector<std::int64_t> verification_rows(const RefineMeasurements& measurements,
                                            const nlohmann::json& entry);

nlohmann::json refine_report_json(const RefineMeasurements& measurements,
                                  const nlohmann::json& refined, const PinVerification& check);
std::string refine_report_markdown(const RefineMeasurements& measurements,
                                   const nlohmann::json& refined, const PinVerification& check);

struct RefineOptions {
  RefineRequest request;
  std::string out_dir;   // empty: no report files
  std::string pin_file;  // empty: nothing merged
  std::vector<std::string> argv;
  nlohmann::json environment;  // the report's meta block (environment_meta of the app's registry)
};
// Measures (the base entry from request.base_pin_file), verifies, prints a summary, writes
// OUT/algos-refine-<dtype>-<form>-N<n>-K<k>.{json,md} and merges the refined table into the pin
// file when verification passed. Returns 0, 1 when verification found a difference (nothing
// merged), 3 on a device error.
int run_algos_refine(const RefineOptions& options);

}  // namespace bitcheck
