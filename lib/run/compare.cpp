// Drift metrics, accuracy checks and fingerprints.
#include "run/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/counter_hash.h"
#include "core/host_threads.h"

namespace bitcheck {
namespace {
constexpr std::size_t max_listed_rows = 16;

// Tensor::get of `count` consecutive elements from `first` into `out`, the dtype looked at once.
void get_range(const Tensor& tensor, std::int64_t first, std::int64_t count, float* out) {
  const DType dtype = tensor.dtype();
  const std::size_t size = dtype_size(dtype);
  const auto* p =
      static_cast<const std::byte*>(tensor.data()) + static_cast<std::size_t>(first) * size;
  if (dtype == DType::bf16 || dtype == DType::fp16) {
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint16_t half;
      std::memcpy(&half, p + 2 * i, 2);
      out[i] = dtype == DType::bf16 ? bf16_bits_to_float(half) : fp16_bits_to_float(half);
    }
    return;
  }
  if (dtype == DType::fp32) {
    std::memcpy(out, p, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) out[i] = tensor.get(first + i);
}

// The parts a check of `elements` splits into: about `part_elements` each (one part below two of
// them). Fixed by the size alone, so the parts' results, merged in part order, are the one pass's.
std::size_t part_count(std::size_t elements, std::size_t part_elements) {
  return elements < 2 * part_elements ? 1 : (elements + part_elements - 1) / part_elements;
}

// The elements of `rows` x `width` (row-major) in `parts` equal parts of the flat range, each part
// on a thread: span(part, row, first_column, last_column) for each piece of a row in the part, in
// order, at most `most_columns` wide (a part may begin or end inside a row).
template <typename Span>
void spans_in_parts(std::size_t parts, std::size_t rows, std::int64_t width,
                    std::int64_t most_columns, const Span& span) {
  const std::size_t elements = rows * static_cast<std::size_t>(width);
  const std::size_t step = (elements + parts - 1) / parts;
  run_on_threads(parts, parts <= 1 ? 1 : threads_for(parts), [&](std::size_t part) {
    const std::size_t last = std::min(elements, (part + 1) * step);
    for (std::size_t at = std::min(elements, part * step); at < last;) {
      const std::size_t row = at / static_cast<std::size_t>(width);
      const auto column = static_cast<std::int64_t>(at % static_cast<std::size_t>(width));
      const std::int64_t end =
          std::min({width, column + most_columns, column + static_cast<std::int64_t>(last - at)});
      span(part, row, column, end);
      at += static_cast<std::size_t>(end - column);
    }
  });
}

double relative(double difference, double reference) {
  double magnitude = std::fabs(reference);
  if (magnitude == 0.0) return difference == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return difference / magnitude;
}
}  // namespace

DriftComparator::DriftComparator(std::string tensor, DType dtype) {
  metrics_.tensor = std::move(tensor);
  metrics_.dtype = dtype;
}

void DriftComparator::compare_row(std::int64_t logical_row, const Tensor& expected,
                                  std::int64_t expected_row, const Tensor& actual,
                                  std::int64_t actual_row) {
  compare_span(logical_row, expected, expected_row, actual, actual_row, 0, expected.row_size());
}

void DriftComparator::compare_span(std::int64_t logical_row, const Tensor& expected,
                                   std::int64_t expected_row, const Tensor& actual,
                                   std::int64_t actual_row, std::int64_t first_column,
                                   std::int64_t last_column) {
  const std::int64_t width = expected.row_size();
  const std::size_t size = dtype_size(expected.dtype());
  metrics_.compared += last_column - first_column;
  // Fast path: identical spans (the common case) are one memcmp.
  if (std::memcmp(static_cast<const std::byte*>(expected.data()) +
                      size * static_cast<std::size_t>(expected_row * width + first_column),
                  static_cast<const std::byte*>(actual.data()) +
                      size * static_cast<std::size_t>(actual_row * width + first_column),
                  size * static_cast<std::size_t>(last_column - first_column)) == 0) {
    return;
  }
  bool row_differs = false;
  for (std::int64_t column = first_column; column < last_column; ++column) {
    std::uint32_t e_bits = expected.bits(expected_row * width + column);
    std::uint32_t a_bits = actual.bits(actual_row * width + column);
    if (e_bits == a_bits) continue;
    row_differs = true;
    ++metrics_.mismatch_count;
    double e = decode_bits(metrics_.dtype, e_bits), a = decode_bits(metrics_.dtype, a_bits);
    double difference = std::fabs(a - e);
    if (std::isnan(difference)) difference = std::numeric_limits<double>::infinity();
    metrics_.max_abs_diff = std::max(metrics_.max_abs_diff, difference);
    metrics_.max_rel_diff = std::max(metrics_.max_rel_diff, relative(difference, e));
    metrics_.max_ulp_distance =
        std::max(metrics_.max_ulp_distance, ulp_distance(metrics_.dtype, e_bits, a_bits));
    if (!metrics_.first_mismatch) {
      metrics_.first_mismatch = Mismatch{logical_row,           column, static_cast<float>(e),
                                         static_cast<float>(a), e_bits, a_bits};
    }
  }
  // A row counts once: a span that continues the last differing row adds nothing.
  if (row_differs && !(first_column > 0 && last_differing_row_ == logical_row)) {
    ++metrics_.rows_differing;
    if (metrics_.differing_rows.size() < max_listed_rows) {
      metrics_.differing_rows.push_back(logical_row);
    }
    if (first_differing_row_ < 0) first_differing_row_ = logical_row;
    last_differing_row_ = logical_row;
  }
}

void DriftComparator::append(const DriftComparator& later) {
  const DriftMetrics& more = later.metrics_;
  metrics_.compared += more.compared;
  metrics_.mismatch_count += more.mismatch_count;
  metrics_.max_abs_diff = std::max(metrics_.max_abs_diff, more.max_abs_diff);
  metrics_.max_rel_diff = std::max(metrics_.max_rel_diff, more.max_rel_diff);
  metrics_.max_ulp_distance = std::max(metrics_.max_ulp_distance, more.max_ulp_distance);
  if (!metrics_.first_mismatch) metrics_.first_mismatch = more.first_mismatch;
  // The later part's first differing row is this one's last when a row spans both.
  const bool shared =
      later.first_differing_row_ >= 0 && later.first_differing_row_ == last_differing_row_;
  metrics_.rows_differing += more.rows_differing - (shared ? 1 : 0);
  for (std::size_t k = shared ? 1 : 0; k < more.differing_rows.size(); ++k) {
    if (metrics_.differing_rows.size() >= max_listed_rows) break;
    metrics_.differing_rows.push_back(more.differing_rows[k]);
  }
  if (first_differing_row_ < 0) first_differing_row_ = later.first_differing_row_;
  if (later.last_differing_row_ >= 0) last_differing_row_ = later.last_differing_row_;
}

DriftMetrics compare_all_rows(const std::string& tensor, DType dtype, const Tensor& expected,
                              const Tensor& actual) {
  const std::int64_t rows = expected.rows(), width = expected.row_size();
  const std::size_t parts = part_count(static_cast<std::size_t>(rows * width),
                                       (std::size_t(8) << 20) / dtype_size(expected.dtype()));
  std::vector<DriftComparator> comparators(parts, DriftComparator(tensor, dtype));
  spans_in_parts(parts, static_cast<std::size_t>(rows), width, width,
                 [&](std::size_t part, std::size_t row, std::int64_t first, std::int64_t last) {
                   const auto r = static_cast<std::int64_t>(row);
                   comparators[part].compare_span(r, expected, r, actual, r, first, last);
                 });
  DriftComparator merged = comparators.front();
  for (std::size_t p = 1; p < parts; ++p) merged.append(comparators[p]);
  return merged.metrics();
}

AccuracyMetrics check_accuracy(const std::string& tensor, const Tensor& actual,
                               const std::vector<std::int64_t>& actual_rows,
                               const Tensor& reference, const std::vector<std::int64_t>& row_ids,
                               double atol, double rtol, const std::vector<std::int64_t>& columns,
                               const NonFiniteRules& rules) {
  const std::int64_t width = actual.row_size();
  const bool sampled =
      !columns.empty() && reference.row_size() == static_cast<std::int64_t>(columns.size());
  const std::int64_t reference_width = reference.row_size();
  // The metrics of a part of the reference's elements (row-major; row i is actual's row
  // actual_rows[i]), the excess of its worst element (-1: none), and its decoded values.
  struct Part {
    AccuracyMetrics metrics;
    double worst_excess = -1.0;
    std::vector<float> actual_span, reference_span;
  };
  // Values decoded a span of at most 16K columns at a time: a chain's flattened vocabulary-sized
  // gradient is one row of 525M elements, and buffers of its width cost gigabytes of page faults.
  constexpr std::int64_t span_columns = 16384;
  auto scan = [&](Part& part, std::size_t i, std::int64_t j0, std::int64_t j1) {
    AccuracyMetrics& metrics = part.metrics;
    double& worst_excess = part.worst_excess;
    std::vector<float>& actual_span = part.actual_span;
    std::vector<float>& reference_span = part.reference_span;
    if (actual_span.size() < static_cast<std::size_t>(j1 - j0)) {
      actual_span.resize(static_cast<std::size_t>(j1 - j0));
      reference_span.resize(actual_span.size());
    }
    get_range(reference, static_cast<std::int64_t>(i) * reference_width + j0, j1 - j0,
              reference_span.data());
    if (sampled) {
      for (std::int64_t j = j0; j < j1; ++j)
        actual_span[static_cast<std::size_t>(j - j0)] =
            actual.get(actual_rows[i] * width + columns[static_cast<std::size_t>(j)]);
    } else {
      get_range(actual, actual_rows[i] * width + j0, j1 - j0, actual_span.data());
    }
    for (std::int64_t j = j0; j < j1; ++j) {
      std::int64_t column = sampled ? columns[static_cast<std::size_t>(j)] : j;
      std::int64_t a_index = actual_rows[i] * width + column;
      std::int64_t r_index = static_cast<std::int64_t>(i) * reference_width + j;
      double a = actual_span[static_cast<std::size_t>(j - j0)],
             r = reference_span[static_cast<std::size_t>(j - j0)];
      ++metrics.compared;
      auto record_worst = [&](double excess) {
        if (excess <= worst_excess) return;
        worst_excess = excess;
        metrics.worst = Mismatch{row_ids[i],
                                 column,
                                 static_cast<float>(r),
                                 static_cast<float>(a),
                                 reference.bits(r_index),
                                 actual.bits(a_index)};
      };
      if (std::isnan(a) || std::isnan(r)) {
        if (rules.nan_matches_reference && std::isnan(a) && std::isnan(r)) {
          ++metrics.nonfinite_matched;
          continue;
        }
        ++metrics.nan_count;
        record_worst(std::numeric_limits<double>::infinity());
        continue;
      }
      if (std::isinf(r) && a == r) {
        ++metrics.nonfinite_matched;
        continue;
      }
      // An infinity on one side only (or of the other sign) is never within a threshold: with an
      // infinite reference, rtol * |ref| would be infinite too.
      const bool infinite = std::isinf(a) || std::isinf(r);
      double error = infinite ? std::numeric_limits<double>::infinity() : std::fabs(a - r);
      metrics.max_abs_error = std::max(metrics.max_abs_error, error);
      metrics.max_rel_error = std::max(metrics.max_rel_error, relative(error, r));
      double allowed = atol + rtol * std::fabs(r);
      if (!infinite && error <= allowed) continue;
      ++metrics.violations;
      record_worst(infinite ? std::numeric_limits<double>::infinity() : error - allowed);
    }
  };
  // Large checks (vocab-sized gradients) in fixed parts of elements, each on a thread, merged in
  // order: counts add, maxima are maxima, and the worst is the first of the largest excess, as one
  // pass in order finds it.
  const std::size_t rows = actual_rows.size();
  const std::size_t parts =
      part_count(rows * static_cast<std::size_t>(reference_width), std::size_t(1) << 21);
  std::vector<Part> results(parts);
  spans_in_parts(parts, rows, reference_width, span_columns,
                 [&](std::size_t part, std::size_t i, std::int64_t j0, std::int64_t j1) {
                   scan(results[part], i, j0, j1);
                 });
  AccuracyMetrics metrics;
  metrics.tensor = tensor;
  metrics.atol = atol;
  metrics.rtol = rtol;
  double worst_excess = -1.0;
  for (const Part& part : results) {
    metrics.compared += part.metrics.compared;
    metrics.violations += part.metrics.violations;
    metrics.nan_count += part.metrics.nan_count;
    metrics.nonfinite_matched += part.metrics.nonfinite_matched;
    metrics.max_abs_error = std::max(metrics.max_abs_error, part.metrics.max_abs_error);
    metrics.max_rel_error = std::max(metrics.max_rel_error, part.metrics.max_rel_error);
    if (part.worst_excess > worst_excess) {
      worst_excess = part.worst_excess;
      metrics.worst = part.metrics.worst;
    }
  }
  return metrics;
}

std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes, std::uint64_t seed) {
  return counter::fnv1a(static_cast<const unsigned char*>(data), bytes, counter::fnv_offset ^ seed);
}

std::uint64_t fingerprint_rows(const Tensor& tensor, const std::vector<std::int64_t>& rows,
                               std::uint64_t seed) {
  const std::size_t row_bytes =
      static_cast<std::size_t>(tensor.row_size()) * dtype_size(tensor.dtype());
  std::uint64_t hash = seed;
  for (std::int64_t row : rows) {
    hash = fingerprint_bytes(
        static_cast<const std::byte*>(tensor.data()) + row_bytes * static_cast<std::size_t>(row),
        row_bytes, hash);
  }
  return hash;
}

std::string fingerprint_hex(std::uint64_t fingerprint) {
  char buffer[20];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(fingerprint));
  return buffer;
}

}  // namespace bitcheck
