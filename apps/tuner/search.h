// `bitcheck algos`: searches cuBLASLt configurations of one GEMM shape for a set that is invariant
// and fast. The device side (search_measure.cpp) measures every candidate at a list of
// M values: a fingerprint of each output row, accuracy against an fp64 reference, CUDA-event
// timings. This side needs no GPU: it groups candidates into bit-classes, picks per class the
// fastest configuration per M bucket, scores the classes against the heuristic and writes reports.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "matmul/pin_format.h"

namespace bitcheck {

// One bucket per tested M, ending at it: [1, m1], [m1 + 1, m2], ..., and the last [m(n-1) + 1, inf)
// for the largest. A bucket's configuration is the one fastest at its upper edge, the M with the
// most tiles in it. Sorted and deduplicated first.
std::vector<RowBucket> buckets_from_rows(std::vector<std::int64_t> rows);
// One M inside each bucket that buckets_from_rows(edges) makes, where the bucket holds 3 or more
// values: the geometric middle of [low, high] (high the bucket's tested edge), rounded, below high.
// `algos` times these too, so a bucket's configuration is judged inside the bucket as well as at
// its upper edge (a configuration fastest at M = 96 can be 15 % slower at M = 80). Sorted.
std::vector<std::int64_t> interior_rows(std::vector<std::int64_t> edges);
// buckets_from_rows(default_algos_rows()).
const std::vector<RowBucket>& default_row_buckets();
// Index of the bucket holding `rows`; throws std::out_of_range when none does.
std::size_t bucket_index(const std::vector<RowBucket>& buckets, std::int64_t rows);

// The M values of the search, which are also the bucket edges.
const std::vector<std::int64_t>& default_algos_rows();

// One candidate run at one M. The fingerprints are of each output row r < M, computed on the same
// X rows for every M (row r of X is identical whatever M is).
struct AlgoRun {
  std::vector<std::uint64_t> row_fingerprints;
  double accuracy_ratio = 0;  // worst |y - ref| / rounding bound over the checked rows
  double median_us = -1;      // < 0: not timed
  bool fully_timed = false;   // false: a short estimate (the candidate was not competitive at M)
};

struct AlgoCandidate {
  std::string describe;                     // the configuration in words
  nlohmann::json config;                    // the configuration's fields, as in the pin file
  std::string origin;                       // e.g. "heuristic #2 at M=64", "split-K 4 of c3"
  std::vector<std::int64_t> accepted_rows;  // checked M values where cuBLASLt accepts it
  std::map<std::int64_t, AlgoRun> runs;     // tested M -> run; absent where not accepted
  std::string error;                        // a run failed: the candidate is out
};

struct AlgoMeasurements {
  std::string dtype = "bf16";
  std::string form = "forward";  // forward | input_grad
  std::int64_t n = 0, k = 0;
  std::uint64_t seed = 1;
  std::vector<std::int64_t> tested_rows;        // M values every candidate ran at (where accepted)
  std::vector<std::int64_t> checked_rows;       // M values where acceptance was checked (1..16384)
  double accuracy_limit = 2.0;                  // accuracy_ratio above this: inaccurate
  std::map<std::int64_t, double> heuristic_us;  // the library default, per tested M
  std::map<std::int64_t, std::string> heuristic_describe;  // its configuration per tested M
  std::vector<AlgoCandidate> candidates;
  std::vector<std::string> notes;  // e.g. candidates left out by the time budget
  nlohmann::json device;           // arch, cublaslt_version, gpu_name, sm_count
  double seconds = 0;
};

enum class CandidateStatus { usable, drifts, inaccurate, failed, never_ran };
std::string to_string(CandidateStatus status);

struct CandidateVerdict {
  CandidateStatus status = CandidateStatus::never_ran;
  std::string detail;     // e.g. "row 5 differs between M=7 and M=64"
  std::int64_t rows = 0;  // rows whose bits are known: the largest M it ran at
};

// Self-invariance and accuracy of one candidate from its runs.
CandidateVerdict judge_candidate(const AlgoCandidate& candidate, double accuracy_limit);

// Candidates whose rows are bitwise identical on every row both computed. The founder is the
// candidate with the most rows; a candidate joins every class whose founder it agrees with (so it
// may be in more than one), or founds a new class.
struct BitClass {
  std::size_t founder = 0;
  std::vector<std::size_t> members;  // candidate indices, founder first
  std::int64_t rows = 0;             // rows whose bits define the class
  std::string fingerprint;           // 16 hex digits over the founder's row fingerprints
};
std::vector<BitClass> group_bit_classes(const std::vector<AlgoCandidate>& candidates,
                                        const std::vector<CandidateVerdict>& verdicts);

struct BucketChoice {
  RowBucket bucket;
  std::optional<std::size_t> candidate;   // none: no member runs at every M of the bucket
  std::vector<std::int64_t> tested_rows;  // tested M values inside the bucket
  double speed_vs_heuristic = 0;          // geometric mean of heuristic time / chosen time
};

struct ClassTable {
  std::size_t bit_class = 0;
  std::vector<BucketChoice>
      choices;            // one per bucket; adjacent buckets of one configuration merged
  bool complete = false;  // every bucket has a configuration
  double score = 0;       // geometric mean over all tested M of heuristic / chosen
  std::map<std::int64_t, double> speed_vs_heuristic;  // per tested M
};

// The fastest member per bucket (geometric mean of time over the bucket's tested M). A member is
// eligible for a bucket when it was timed at every tested M of the bucket and cuBLASLt accepts it
// at every checked M of the bucket.
ClassTable choose_class_table(const AlgoMeasurements& measurements, const BitClass& bit_class,
                              std::size_t class_index, const std::vector<RowBucket>& buckets);

struct AlgoAnalysis {
  std::vector<RowBucket> buckets;
  std::vector<CandidateVerdict> verdicts;  // one per candidate
  std::vector<BitClass> classes;
  std::vector<ClassTable> tables;   // one per class, same order
  std::optional<std::size_t> best;  // the complete table with the highest score
};
AlgoAnalysis analyze_algos(const AlgoMeasurements& measurements,
                           const std::vector<RowBucket>& buckets);

// Speed targets against the heuristic, same run: >= 0.95 at M >= 64, >= 0.8 below.
double algos_target(std::int64_t rows);

// The first fields of an algos report: schema_version, tool, shape, device, seed.
nlohmann::json algos_report_head(const std::string& tool, const std::string& dtype,
                                 const std::string& form, std::int64_t n, std::int64_t k,
                                 const nlohmann::json& device, std::uint64_t seed);

// The whole result (classes, members, per-M timings and ratios, the chosen table) as JSON,
// markdown, and the terminal table.
nlohmann::json algos_report_json(const AlgoMeasurements& measurements,
                                 const AlgoAnalysis& analysis);
std::string algos_report_markdown(const AlgoMeasurements& measurements,
                                  const AlgoAnalysis& analysis);
std::string algos_terminal_table(const AlgoMeasurements& measurements,
                                 const AlgoAnalysis& analysis);

// The best table as a pin-file entry: key, buckets (one configuration each) and the bit-class that
// makes them interchangeable. Throws std::logic_error when there is no best table.
nlohmann::json algos_pin_entry(const AlgoMeasurements& measurements, const AlgoAnalysis& analysis);

// ---- the command ------------------------------------------------------------------------------

struct AlgosRequest {
  std::string dtype = "bf16";
  std::string form = "forward";
  std::int64_t n = 0, k = 0;
  std::vector<std::int64_t> rows;  // bucket edges; empty: default_algos_rows()
  bool interior = true;            // also time interior_rows(rows) (not bucket edges)
  std::uint64_t seed = 1;
  int max_candidates = 160;
  double budget_seconds = 40;  // candidate measurement stops starting new candidates after this
  int warmup = 3;
  int repeats = 20;
  bool progress = true;
};

struct AlgosOptions {
  AlgosRequest request;
  std::string out_dir;   // empty: no files
  std::string pin_file;  // pin directory or file; empty: no pins written
  std::vector<std::string> argv;
  nlohmann::json environment;  // the report's meta block (environment_meta of the app's registry)
};

// Writes OUT_DIR/STEM.json (the report with a meta block: environment, argv, time; unindented) and
// OUT_DIR/STEM.md, each atomically, and says so on stdout.
void write_algos_report_files(const std::string& out_dir, const std::string& stem,
                              nlohmann::json report, const std::string& markdown,
                              const nlohmann::json& environment,
                              const std::vector<std::string>& argv);

// Validates the request (BadInput naming the flag), measures on the device, analyses, prints the
// table, writes OUT/algos-<dtype>-<form>-N<n>-K<k>.{json,md} and merges the best table into the
// pin file. Returns 0 with a table, 1 when no class covers every bucket, 3 on a device error.
int run_algos(const AlgosOptions& options);

// Device side, defined with the CUDA backend (without_cuda.cpp throws without one).
AlgoMeasurements measure_cublaslt_algos(const AlgosRequest& request);
// Merges a pin entry (algos_pin_entry) into a pin directory (the key's own file, e.g.
// contract/pins) or a pin file: replaces the entry with the same key, keeps every other entry as
// it was; validates the result as the pin table loader does and writes it atomically. BadInput
// when the existing file is malformed.
void merge_cublaslt_pin(const std::string& pin_file, const nlohmann::json& entry);

}  // namespace bitcheck
