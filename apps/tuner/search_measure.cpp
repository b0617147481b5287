// `bitcheck algos`, the measurement (with the CUDA backend): which cuBLASLt configurations of one
// GEMM shape to try and when to time them in full. The pinned matmul's primitives do the device
// work (matmul/cublaslt_search.h enumerates, matmul/gemm_rig.h runs each at every tested M on the
// same random rows, fingerprints every output row, reads a set of rows against an fp64 reference
// and times with the benchmark method of every CUDA impl). search.cpp turns this into bit-classes
// and a pin table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include "common/runtime.h"
#include "core/dtype.h"
#include "matmul/cublaslt_gemm.h"
#include "matmul/cublaslt_search.h"
#include "matmul/gemm_rig.h"
#include "matmul/pin_table.h"
#include "tuner/search.h"

namespace bitcheck {
namespace {

using cuda::GemmDType;
using cuda::LtConfig;
using cuda::LtGemmForm;

// Heuristic results taken at every tested M, and M values where the full enumeration runs.
constexpr int kHeuristicTop = 4;
constexpr int kEnumeratedPerRows = 200;
// A candidate gets a full timing at M when its estimate is within this factor of the best there.
constexpr double kCompetitiveFactor = 1.3;
// At most this many full timings per M (the fastest estimates): at large M many option variants
// of one kernel are within the factor, and each full timing costs repeats x milliseconds there.
constexpr std::size_t kMaxFullTimings = 16;
// Besides those: a usable candidate that is the library default's own kernel at M is always timed
// in full, so the chosen class is never compared with the default on an estimate alone.
// Rows always checked against the reference (those < M), besides row M-1 of every tested M.
const std::int64_t kAccuracyRows[] = {0, 1, 2, 6, 31, 100, 255, 999, 4095, 8191};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Unit roundoff of the output (a full ulp at 1): the bound of one rounding of |ref|.
double output_unit(DType dtype) {
  return std::ldexp(1.0, -dtype_mantissa_bits(dtype));
}

struct Proposal {
  LtConfig config;
  std::string origin;
};

class Search {
 public:
  explicit Search(const AlgosRequest& request)
      : request_(request),
        dtype_(cuda::gemm_dtype_named(request.dtype)),
        host_dtype_(*parse_dtype(request.dtype)),
        form_(request.form == "input_grad" ? LtGemmForm::input_grad : LtGemmForm::forward),
        out_cols_(form_ == LtGemmForm::forward ? request.n : request.k),
        element_(dtype_size(host_dtype_)),
        max_rows_(request.rows.back()) {}

  AlgoMeasurements run() {
    const auto start = Clock::now();
    cuda::DeviceInfo device = cuda::query_device();
    if (!device.available) throw std::runtime_error("bitcheck algos: " + device.unavailable_reason);
    AlgoMeasurements m;
    m.dtype = request_.dtype;
    m.form = request_.form;
    m.n = request_.n;
    m.k = request_.k;
    m.seed = request_.seed;
    m.tested_rows = request_.rows;
    m.checked_rows = checked_rows();
    m.device = {{"arch", device.arch()},
                {"cublaslt_version", device.cublaslt_version},
                {"gpu_name", device.name},
                {"sm_count", device.sm_count}};
    rig_ = std::make_unique<cuda::GemmRig>(request_.dtype, request_.form, request_.n, request_.k,
                                           request_.seed, max_rows_);
    compute_reference();
    std::vector<Proposal> proposals = propose();
    measure_candidates(proposals, m, start);
    time_competitive(m);
    m.seconds = seconds_since(start);
    if (request_.progress) std::cerr << "\r\033[K";
    return m;
  }

 private:
  // ---- reference ------------------------------------------------------------------------------

  void compute_reference() {
    std::set<std::int64_t> rows;
    for (std::int64_t r : kAccuracyRows) {
      if (r < max_rows_) rows.insert(r);
    }
    for (std::int64_t m : request_.rows) rows.insert(m - 1);
    accuracy_rows_.assign(rows.begin(), rows.end());
    cuda::GemmRig::ReferenceRows reference = rig_->set_accuracy_rows(accuracy_rows_);
    reference_ = std::move(reference.value);
    reference_abs_ = std::move(reference.abs_sum);
  }

  // ---- candidates -----------------------------------------------------------------------------

  std::vector<std::int64_t> checked_rows() const {
    std::set<std::int64_t> rows(request_.rows.begin(), request_.rows.end());
    for (std::int64_t m : cuda::lt_pinned_checked_rows()) rows.insert(m);
    for (const RowBucket& bucket : default_row_buckets()) {
      rows.insert(bucket.min_rows);
      if (bucket.max_rows) rows.insert(bucket.max_rows);
    }
    return {rows.begin(), rows.end()};
  }

  LtConfig heuristic(std::int64_t rows) const { return rig_->heuristic(rows); }

  // In order of expected value: the heuristic's own picks at every M; split-K counts 1, 2 and 4
  // fixed for every M on those kernels; every algorithm's tiles and stages (with the heuristic's
  // split-K variants) at a few M; the other split counts; the other options of the picks.
  std::vector<Proposal> propose() const {
    std::vector<Proposal> proposals;
    std::vector<LtConfig> picks;  // distinct heuristic picks
    for (std::int64_t rows : request_.rows) {
      const auto top =
          cuda::lt_enumerate_configs(dtype_, rows, request_.n, request_.k, kHeuristicTop, form_);
      for (std::size_t i = 0; i < top.size(); ++i) {
        proposals.push_back(
            {top[i], "heuristic #" + std::to_string(i + 1) + " at M=" + std::to_string(rows)});
        if (std::none_of(picks.begin(), picks.end(),
                         [&](const LtConfig& c) { return c.same_kernel(top[i]); })) {
          picks.push_back(top[i]);
        }
      }
    }
    auto add_splits = [&](std::initializer_list<std::int32_t> counts) {
      for (const LtConfig& base : picks) {
        for (const std::int32_t splits : counts) {
          proposals.push_back({cuda::lt_with_split_k(base, splits),
                               "split-K " + std::to_string(splits) + " on a heuristic pick"});
        }
      }
    };
    add_splits({1, 2, 4});
    for (const std::int64_t rows :
         {std::int64_t(1), std::int64_t(64), std::int64_t(1024), max_rows_}) {
      for (const LtConfig& config : cuda::lt_enumerate_configs(dtype_, rows, request_.n, request_.k,
                                                               kEnumeratedPerRows, form_)) {
        proposals.push_back({config, "enumerated at M=" + std::to_string(rows)});
      }
    }
    add_splits({3, 6, 8, 16});
    for (const LtConfig& base : picks) {
      for (const LtConfig& variant : cuda::lt_option_variants(base, dtype_, form_)) {
        proposals.push_back({variant, "option variant of a heuristic pick"});
      }
    }
    return proposals;
  }

  // The M values (of `rows`) where cuBLASLt accepts the config within the workspace.
  std::vector<std::int64_t> accepted(const LtConfig& config,
                                     const std::vector<std::int64_t>& rows) const {
    std::vector<std::int64_t> result;
    for (std::int64_t m : rows) {
      if (rig_->accepts(config, m)) result.push_back(m);
    }
    return result;
  }

  // ---- running --------------------------------------------------------------------------------

  // Row fingerprints and accuracy of one run at `rows` on the checked buffers (copy 0).
  AlgoRun check_run(const LtConfig& config, std::int64_t rows) {
    AlgoRun run;
    run.row_fingerprints = rig_->row_fingerprints(config, rows);
    // The accuracy rows are sorted: those below M are a prefix.
    const auto count = static_cast<std::int64_t>(
        std::lower_bound(accuracy_rows_.begin(), accuracy_rows_.end(), rows) -
        accuracy_rows_.begin());
    const std::vector<unsigned char> host = rig_->accuracy_row_bytes(count);
    for (std::size_t i = 0; i < static_cast<std::size_t>(count * out_cols_); ++i) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, host.data() + i * element_, element_);
      const double value = decode_bits(host_dtype_, bits);
      const double bound =
          output_unit(host_dtype_) * std::fabs(reference_[i]) + 1e-6 * reference_abs_[i] + 1e-30;
      const double ratio = std::fabs(value - reference_[i]) / bound;
      if (!std::isnan(run.accuracy_ratio) && !(ratio <= run.accuracy_ratio))
        run.accuracy_ratio = ratio;  // NaN sticks
    }
    return run;
  }

  void progress(const std::string& text) const {
    if (request_.progress) std::cerr << "\r\033[K" << text << std::flush;
  }

  void measure_candidates(const std::vector<Proposal>& proposals, AlgoMeasurements& m,
                          Clock::time_point start) {
    std::vector<LtConfig> seen;
    std::size_t over_budget = 0, rejected = 0;
    for (const Proposal& proposal : proposals) {
      if (std::any_of(seen.begin(), seen.end(),
                      [&](const LtConfig& c) { return c.same_kernel(proposal.config); })) {
        continue;
      }
      seen.push_back(proposal.config);
      if (!cuda::lt_reduction_allowed(proposal.config, dtype_, form_)) {
        ++rejected;
        continue;
      }
      if (static_cast<int>(m.candidates.size()) >= request_.max_candidates ||
          seconds_since(start) > request_.budget_seconds) {
        ++over_budget;
        continue;
      }
      const std::vector<std::int64_t> tested = accepted(proposal.config, request_.rows);
      if (tested.empty()) continue;
      AlgoCandidate candidate;
      candidate.describe = proposal.config.describe();
      candidate.config = cuda::lt_config_to_json(proposal.config);
      candidate.origin = proposal.origin;
      candidate.accepted_rows = accepted(proposal.config, m.checked_rows);
      progress("[" + std::to_string(m.candidates.size() + 1) + "] " + candidate.describe);
      try {
        for (std::int64_t rows : tested) {
          AlgoRun run = check_run(proposal.config, rows);
          run.median_us = rig_->median_us(proposal.config, rows, 1, 3);
          candidate.runs[rows] = std::move(run);
        }
      } catch (const cuda::CudaError& error) {
        if (error.sticky()) throw;
        candidate.error = error.what();
      } catch (const std::invalid_argument& error) {
        candidate.error = error.what();
      }
      m.candidates.push_back(std::move(candidate));
      configs_.push_back(proposal.config);
    }
    if (rejected) {
      m.notes.push_back(std::to_string(rejected) +
                        " split-K configurations left out: they reduce partial sums in the " +
                        "output type, against the fp32 accumulation policy");
    }
    if (over_budget) {
      m.notes.push_back(std::to_string(over_budget) +
                        " more proposed configurations not tried (limit of " +
                        std::to_string(request_.max_candidates) + " candidates or " +
                        std::to_string(static_cast<int>(request_.budget_seconds)) + " s reached)");
    }
  }

  // Full timings at each M for the usable candidates whose estimate is competitive, between two
  // timings of the heuristic (the faster counts): the same method and run for both sides.
  void time_competitive(AlgoMeasurements& m) {
    std::vector<bool> usable;
    for (const auto& candidate : m.candidates) {
      usable.push_back(judge_candidate(candidate, m.accuracy_limit).status ==
                       CandidateStatus::usable);
    }
    for (std::int64_t rows : request_.rows) {
      progress("timing M=" + std::to_string(rows));
      const LtConfig library_default = heuristic(rows);
      m.heuristic_describe[rows] = library_default.describe();
      double heuristic_us =
          rig_->median_us(library_default, rows, request_.warmup, request_.repeats);
      double best_estimate = heuristic_us;
      for (std::size_t i = 0; i < m.candidates.size(); ++i) {
        auto run = m.candidates[i].runs.find(rows);
        if (usable[i] && run != m.candidates[i].runs.end())
          best_estimate = std::min(best_estimate, run->second.median_us);
      }
      std::vector<std::pair<double, std::size_t>> competitive;  // (estimate, candidate)
      for (std::size_t i = 0; i < m.candidates.size(); ++i) {
        auto run = m.candidates[i].runs.find(rows);
        if (!usable[i] || run == m.candidates[i].runs.end()) continue;
        if (run->second.median_us <= kCompetitiveFactor * best_estimate)
          competitive.emplace_back(run->second.median_us, i);
      }
      std::sort(competitive.begin(), competitive.end());
      if (competitive.size() > kMaxFullTimings) competitive.resize(kMaxFullTimings);
      for (std::size_t i = 0; i < m.candidates.size(); ++i) {
        auto run = m.candidates[i].runs.find(rows);
        if (!usable[i] || run == m.candidates[i].runs.end() ||
            !configs_[i].same_kernel(library_default)) {
          continue;
        }
        if (std::none_of(competitive.begin(), competitive.end(),
                         [&](const auto& entry) { return entry.second == i; })) {
          competitive.emplace_back(run->second.median_us, i);
        }
      }
      for (const auto& [estimate, i] : competitive) {
        AlgoRun& run = m.candidates[i].runs.at(rows);
        run.median_us = rig_->median_us(configs_[i], rows, request_.warmup, request_.repeats);
        run.fully_timed = true;
      }
      heuristic_us = std::min(
          heuristic_us, rig_->median_us(library_default, rows, request_.warmup, request_.repeats));
      m.heuristic_us[rows] = heuristic_us;
    }
  }

  AlgosRequest request_;
  GemmDType dtype_;
  DType host_dtype_;
  LtGemmForm form_;
  std::int64_t out_cols_;
  std::size_t element_;
  std::int64_t max_rows_;
  std::unique_ptr<cuda::GemmRig> rig_;
  std::vector<std::int64_t> accuracy_rows_;
  std::vector<double> reference_, reference_abs_;
  std::vector<LtConfig> configs_;  // one per measured candidate
};

}  // namespace

AlgoMeasurements measure_cublaslt_algos(const AlgosRequest& request) {
  AlgosRequest sorted = request;
  if (sorted.rows.empty()) sorted.rows = default_algos_rows();
  std::sort(sorted.rows.begin(), sorted.rows.end());
  sorted.rows.erase(std::unique(sorted.rows.begin(), sorted.rows.end()), sorted.rows.end());
  return Search(sorted).run();
}

void merge_cublaslt_pin(const std::string& pin_file, const nlohmann::json& entry) {
  cuda::merge_pin_entry(pin_file, entry);
}

}  // namespace bitcheck
