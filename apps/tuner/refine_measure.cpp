// `bitcheck algos --refine`, the measurement (with the CUDA backend): the heuristic's pick at every
// scanned M, the pieces where it differs from the table, its bits against the table's, and timings
// of both in each piece (refine.h), on the pinned matmul's GEMM rig (matmul/gemm_rig.h). The host
// side (refine.cpp) chooses and writes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include "common/runtime.h"
#include "core/error.h"
#include "core/json_input.h"
#include "matmul/cublaslt_search.h"
#include "matmul/gemm_rig.h"
#include "matmul/pin_table.h"
#include "tuner/refine.h"

namespace bitcheck {
namespace {

using cuda::LtConfig;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The first row where `bits` (rows 0..size-1 of a run) differs from `reference`, or -1.
std::int64_t first_difference(const std::vector<std::uint64_t>& bits,
                              const std::vector<std::uint64_t>& reference) {
  const std::size_t rows = std::min(bits.size(), reference.size());
  for (std::size_t r = 0; r < rows; ++r) {
    if (bits[r] != reference[r]) return static_cast<std::int64_t>(r);
  }
  return -1;
}

cuda::PinEntry parse_entry(const nlohmann::json& entry, const std::string& where) {
  const nlohmann::json document = {{"schema_version", 1}, {"pins", nlohmann::json::array({entry})}};
  return cuda::parse_pin_document(document, where).front();
}

// The bucketed entry for this device and shape in the base pins (a directory or one file).
nlohmann::json find_base_entry(const RefineRequest& request, const cuda::DeviceInfo& device) {
  for (const cuda::PinFile& file : cuda::read_pin_files(request.base_pin_file)) {
    const auto entries = cuda::parse_pin_document(file.document, file.path);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const cuda::PinKey& key = entries[i].key;
      if (key.arch != device.arch() || key.cublaslt_version != device.cublaslt_version ||
          key.dtype != request.dtype || key.form != request.form || key.n != request.n ||
          key.k != request.k) {
        continue;
      }
      if (entries[i].buckets.empty()) {
        throw BadInput(file.path, "/pins/" + std::to_string(i) + "/buckets",
                       "a bucketed pin (from `bitcheck algos`) to refine, found a single config");
      }
      // Each bucket with its configuration written out (the file may name them by index).
      nlohmann::json entry = file.document["pins"][i];
      entry.erase("configs");
      for (std::size_t b = 0; b < entries[i].buckets.size(); ++b)
        entry["buckets"][b]["config"] = cuda::lt_config_to_json(entries[i].buckets[b].config);
      return entry;
    }
  }
  throw BadInput(request.base_pin_file, "/pins",
                 "a bucketed pin for arch " + device.arch() + ", cuBLASLt " +
                     std::to_string(device.cublaslt_version) + ", " + request.dtype + " " +
                     request.form + " N=" + std::to_string(request.n) +
                     " K=" + std::to_string(request.k) + " (run `bitcheck algos` first)");
}

class Refine {
 public:
  explicit Refine(const RefineRequest& request) : request_(request) {}

  RefineMeasurements run() {
    const auto start = Clock::now();
    const cuda::DeviceInfo device = cuda::query_device();
    if (!device.available) throw std::runtime_error("bitcheck algos: " + device.unavailable_reason);
    RefineMeasurements m;
    m.request = request_;
    m.base_entry = find_base_entry(request_, device);
    m.device = {{"arch", device.arch()},
                {"cublaslt_version", device.cublaslt_version},
                {"gpu_name", device.name},
                {"sm_count", device.sm_count}};
    const cuda::PinEntry base = parse_entry(m.base_entry, request_.base_pin_file);
    rig_ = std::make_unique<cuda::GemmRig>(request_.dtype, request_.form, request_.n, request_.k,
                                           request_.seed, request_.scan_rows);
    progress("reference: the table at M=" + std::to_string(request_.scan_rows));
    reference_ =
        rig_->row_fingerprints(base.config_for_rows(request_.scan_rows), request_.scan_rows);
    scan(m);
    make_pieces(m, base);
    judge_and_time(m, base, start);
    m.seconds = seconds_since(start);
    if (request_.progress) std::cerr << "\r\033[K";
    return m;
  }

 private:
  void progress(const std::string& text) const {
    if (request_.progress) std::cerr << "\r\033[K" << text << std::flush;
  }

  // The heuristic's top pick at every M from 1 to scan_rows, as segments of one kernel.
  void scan(RefineMeasurements& m) {
    const auto start = Clock::now();
    std::vector<LtConfig> configs;
    for (std::int64_t rows = 1; rows <= request_.scan_rows; ++rows) {
      if (rows % 512 == 1) progress("heuristic at M=" + std::to_string(rows));
      const LtConfig pick = rig_->heuristic(rows);
      if (!configs.empty() && configs.back().same_kernel(pick)) {
        m.segments.back().max_rows = rows;
        configs.back().workspace_bytes =
            std::max(configs.back().workspace_bytes, pick.workspace_bytes);
        continue;
      }
      configs.push_back(pick);
      HeuristicSegment segment;
      segment.min_rows = segment.max_rows = rows;
      segment.splitk = pick.splitk_num;
      m.segments.push_back(segment);
    }
    for (std::size_t i = 0; i < configs.size(); ++i) {
      m.segments[i].config = cuda::lt_config_to_json(configs[i]);
      m.segments[i].describe = configs[i].describe();
    }
    segment_configs_ = std::move(configs);
    m.scan_seconds = seconds_since(start);
  }

  // Every table bucket cut at every segment edge; the part of the last bucket past the scan is a
  // piece of its own.
  void make_pieces(RefineMeasurements& m, const cuda::PinEntry& base) {
    std::size_t s = 0;
    for (std::size_t b = 0; b < base.buckets.size(); ++b) {
      const cuda::PinBucket& bucket = base.buckets[b];
      std::int64_t low = bucket.min_rows;
      const std::int64_t high = bucket.max_rows;  // 0: unbounded
      while (low <= request_.scan_rows && (high == 0 || low <= high)) {
        while (m.segments[s].max_rows < low) ++s;
        RefinePiece piece;
        piece.min_rows = low;
        piece.max_rows =
            high == 0 ? m.segments[s].max_rows : std::min(high, m.segments[s].max_rows);
        piece.bucket = b;
        piece.segment = s;
        m.pieces.push_back(piece);
        low = piece.max_rows + 1;
      }
      if (low > request_.scan_rows && (high == 0 || low <= high)) {
        RefinePiece piece;
        piece.min_rows = low;
        piece.max_rows = high;
        piece.bucket = b;
        piece.status = PieceStatus::past_scan;
        piece.detail = "past the scanned M (" + std::to_string(request_.scan_rows) + ")";
        m.pieces.push_back(piece);
      }
    }
  }

  // Why `config` at M = rows is not in the table's class (empty: it is): rejected by cuBLASLt or a
  // failed run (status rejected), or a row with other bits (status other_bits). Cached per
  // configuration and M.
  std::string bits_problem(const LtConfig& config, std::int64_t rows, PieceStatus& status) {
    const auto key = std::make_pair(config.describe(), rows);
    auto cached = bits_problems_.find(key);
    if (cached == bits_problems_.end()) {
      std::pair<PieceStatus, std::string> found{PieceStatus::timed, ""};
      if (!rig_->accepts(config, rows)) {
        found = {PieceStatus::rejected,
                 "cuBLASLt rejects it at M=" + std::to_string(rows) + " with 32 MiB workspace"};
      } else {
        try {
          const std::int64_t row =
              first_difference(rig_->row_fingerprints(config, rows), reference_);
          if (row >= 0) {
            found = {PieceStatus::other_bits,
                     "row " + std::to_string(row) + " at M=" + std::to_string(rows) +
                         " differs from the table's at M=" + std::to_string(request_.scan_rows)};
          }
        } catch (const cuda::CudaError& error) {
          if (error.sticky()) throw;
          found = {PieceStatus::rejected, error.what()};
        }
      }
      cached = bits_problems_.emplace(key, found).first;
    }
    if (!cached->second.second.empty()) status = cached->second.first;
    return cached->second.second;
  }

  // Why the segment's pick cannot stand in for the table (empty: it can): split-K, rejection at
  // an end of the segment, or other bits than the table at either end (rows compared: all rows
  // of the run, up to the scan).
  std::string segment_problem(const RefineMeasurements& m, std::size_t s, PieceStatus& status) {
    auto cached = segment_problems_.find(s);
    if (cached != segment_problems_.end()) {
      status = segment_status_[s];
      return cached->second;
    }
    const HeuristicSegment& segment = m.segments[s];
    const LtConfig& pick = segment_configs_[s];
    std::string problem;
    status = PieceStatus::timed;
    if (pick.splitk_num != 1) {
      status = PieceStatus::splits_k;
      problem = "the heuristic splits K " + std::to_string(pick.splitk_num) + " ways";
    } else {
      for (const std::int64_t rows : {segment.min_rows, segment.max_rows}) {
        problem = bits_problem(pick, rows, status);
        if (!problem.empty()) break;
      }
      if (problem.empty()) status = PieceStatus::timed;
    }
    segment_problems_[s] = problem;
    segment_status_[s] = status;
    return problem;
  }

  void judge_and_time(RefineMeasurements& m, const cuda::PinEntry& base, Clock::time_point start) {
    std::size_t over_budget = 0;
    for (std::size_t p = 0; p < m.pieces.size(); ++p) {
      RefinePiece& piece = m.pieces[p];
      if (piece.status == PieceStatus::past_scan) continue;
      const std::size_t s = *piece.segment;
      const LtConfig& table = base.buckets[piece.bucket].config;
      const LtConfig& pick = segment_configs_[s];
      if (table.same_kernel(pick)) {
        piece.status = PieceStatus::same;
        continue;
      }
      progress("[" + std::to_string(p + 1) + "/" + std::to_string(m.pieces.size()) + "] M " +
               std::to_string(piece.min_rows) + "-" + std::to_string(piece.max_rows));
      PieceStatus status = PieceStatus::timed;
      const std::string problem = segment_problem(m, s, status);
      if (!problem.empty()) {
        piece.status = status;
        piece.detail = problem;
        if (status == PieceStatus::splits_k && seconds_since(start) <= request_.budget_seconds)
          search_split_k(piece, table, pick);
        continue;
      }
      if (seconds_since(start) > request_.budget_seconds) {
        piece.status = PieceStatus::not_timed;
        piece.detail = "time budget spent";
        ++over_budget;
        continue;
      }
      const std::set<std::int64_t> rows = timed_rows(piece);
      piece.status = PieceStatus::timed;
      for (const std::int64_t m_rows : rows) {
        // Both twice, interleaved; the faster of each pair counts (the same method for both).
        double table_us = rig_->median_us(table, m_rows, request_.warmup, request_.repeats);
        double pick_us = rig_->median_us(pick, m_rows, request_.warmup, request_.repeats);
        table_us =
            std::min(table_us, rig_->median_us(table, m_rows, request_.warmup, request_.repeats));
        pick_us =
            std::min(pick_us, rig_->median_us(pick, m_rows, request_.warmup, request_.repeats));
        piece.timed_rows.push_back(m_rows);
        piece.table_us.push_back(table_us);
        piece.heuristic_us.push_back(pick_us);
      }
    }
    if (over_budget) {
      m.notes.push_back(std::to_string(over_budget) + " pieces not timed (budget of " +
                        std::to_string(static_cast<int>(request_.budget_seconds)) +
                        " s spent): they take the heuristic's pick, the library default there");
    }
  }

  // A piece's ends and its geometric middle.
  static std::set<std::int64_t> timed_rows(const RefinePiece& piece) {
    std::set<std::int64_t> rows = {piece.min_rows, piece.max_rows};
    if (piece.max_rows - piece.min_rows >= 2) {
      rows.insert(std::clamp<std::int64_t>(
          std::llround(std::sqrt(double(piece.min_rows) * double(piece.max_rows))),
          piece.min_rows + 1, piece.max_rows - 1));
    }
    return rows;
  }

  // Where the heuristic splits K (another bit-class), the table's configuration was chosen for a
  // whole bucket: try the split-K-1 configurations cuBLASLt lists at this piece's M (the pick
  // without its split first), keep those with the table's bits at both ends of the piece, time
  // them against the table and the heuristic's pick, and take the fastest when it beats the table
  // by kKeepMargin at every timed M.
  void search_split_k(RefinePiece& piece, const LtConfig& table, const LtConfig& pick) {
    const std::set<std::int64_t> rows = timed_rows(piece);
    const std::int64_t middle = *std::next(rows.begin(), static_cast<long>(rows.size() / 2));
    std::vector<LtConfig> candidates;
    auto offer = [&](LtConfig config) {
      if (config.splitk_num != 1 || config.same_kernel(table) ||
          static_cast<int>(candidates.size()) >= request_.split_k_candidates ||
          std::any_of(candidates.begin(), candidates.end(),
                      [&](const LtConfig& c) { return c.same_kernel(config); })) {
        return;
      }
      candidates.push_back(config);
    };
    LtConfig unsplit = pick;
    unsplit.splitk_num = 1;
    unsplit.reduction_scheme = 0;  // CUBLASLT_REDUCTION_SCHEME_NONE
    offer(unsplit);
    for (const LtConfig& listed :
         cuda::lt_enumerate_configs(rig_->dtype(), middle, rig_->n(), rig_->k(),
                                    4 * request_.split_k_candidates, rig_->form())) {
      offer(listed);
    }
    std::vector<LtConfig> usable;
    for (const LtConfig& config : candidates) {
      PieceStatus status = PieceStatus::timed;
      if (bits_problem(config, piece.min_rows, status).empty() &&
          bits_problem(config, piece.max_rows, status).empty()) {
        usable.push_back(config);
      }
    }
    piece.searched_candidates = static_cast<int>(usable.size());
    if (usable.empty()) return;
    const int warmup = request_.warmup, repeats = request_.repeats;
    std::vector<std::vector<double>> usable_us(usable.size());
    for (const std::int64_t m_rows : rows) {
      piece.timed_rows.push_back(m_rows);
      piece.table_us.push_back(rig_->median_us(table, m_rows, warmup, repeats));
      piece.heuristic_us.push_back(rig_->median_us(pick, m_rows, warmup, repeats));
      for (std::size_t c = 0; c < usable.size(); ++c)
        usable_us[c].push_back(rig_->median_us(usable[c], m_rows, warmup, repeats));
      // A second round, interleaved; the faster counts.
      piece.table_us.back() =
          std::min(piece.table_us.back(), rig_->median_us(table, m_rows, warmup, repeats));
      piece.heuristic_us.back() =
          std::min(piece.heuristic_us.back(), rig_->median_us(pick, m_rows, warmup, repeats));
      for (std::size_t c = 0; c < usable.size(); ++c)
        usable_us[c].back() =
            std::min(usable_us[c].back(), rig_->median_us(usable[c], m_rows, warmup, repeats));
    }
    // The candidate whose worst time against the table is least.
    std::size_t best = 0;
    double best_worst = 0;
    for (std::size_t c = 0; c < usable.size(); ++c) {
      double worst = 0;
      for (std::size_t i = 0; i < rows.size(); ++i)
        worst = std::max(worst, usable_us[c][i] / piece.table_us[i]);
      if (c == 0 || worst < best_worst) {
        best = c;
        best_worst = worst;
      }
    }
    piece.searched_us = usable_us[best];
    if (best_worst * kKeepMargin <= 1.0) {
      piece.searched_config = cuda::lt_config_to_json(usable[best]);
      piece.searched_describe = usable[best].describe();
    }
  }

  RefineRequest request_;
  std::map<std::pair<std::string, std::int64_t>, std::pair<PieceStatus, std::string>>
      bits_problems_;
  std::unique_ptr<cuda::GemmRig> rig_;
  std::vector<std::uint64_t> reference_;
  std::vector<LtConfig> segment_configs_;
  std::map<std::size_t, std::string> segment_problems_;
  std::map<std::size_t, PieceStatus> segment_status_;
};

}  // namespace

RefineMeasurements measure_cublaslt_refine(const RefineRequest& request) {
  return Refine(request).run();
}

PinVerification verify_cublaslt_pin(const RefineRequest& request, const nlohmann::json& entry,
                                    const nlohmann::json& reference_entry,
                                    const std::vector<std::int64_t>& rows) {
  const auto start = Clock::now();
  PinVerification result;
  result.rows = rows;
  std::sort(result.rows.begin(), result.rows.end());
  result.rows.erase(std::unique(result.rows.begin(), result.rows.end()), result.rows.end());
  if (result.rows.empty() || result.rows.front() < 1)
    throw std::invalid_argument("verify_cublaslt_pin: positive row counts needed");
  const cuda::PinEntry checked = parse_entry(entry, "the refined pin entry");
  const cuda::PinEntry reference = parse_entry(reference_entry, "the reference pin entry");
  const std::int64_t largest = result.rows.back();
  cuda::GemmRig rig(request.dtype, request.form, request.n, request.k, request.seed, largest);
  const std::vector<std::uint64_t> expected =
      rig.row_fingerprints(reference.config_for_rows(largest), largest);
  for (const std::int64_t m : result.rows) {
    if (request.progress && m % 64 == 0) std::cerr << "\r\033[Kverify M=" << m << std::flush;
    const LtConfig& config = checked.config_for_rows(m);
    const std::int64_t row = first_difference(rig.row_fingerprints(config, m), expected);
    result.rows_compared += m;
    if (row >= 0 && !result.mismatch) {
      result.mismatch = "row " + std::to_string(row) + " at M=" + std::to_string(m) + " (" +
                        config.describe() +
                        ") differs from the reference table's at M=" + std::to_string(largest);
    }
  }
  if (request.progress) std::cerr << "\r\033[K";
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace bitcheck
