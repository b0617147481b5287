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
  const std::int64_t width = expected.row_size();
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(expected.dtype());
  metrics_.compared += width;
  // Fast path: identical rows (the common case) are one memcmp.
  if (std::memcmp(static_cast<const std::byte*>(expected.data()) +
                      row_bytes * static_cast<std::size_t>(expected_row),
                  static_cast<const std::byte*>(actual.data()) +
                      row_bytes * static_cast<std::size_t>(actual_row),
                  row_bytes) == 0) {
    return;
  }
  bool row_differs = false;
  for (std::int64_t column = 0; column < width; ++column) {
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
  if (row_differs) {
    ++metrics_.rows_differing;
    if (metrics_.differing_rows.size() < max_listed_rows) {
      metrics_.differing_rows.push_back(logical_row);
    }
  }
}

void DriftComparator::append(const DriftMetrics& later) {
  metrics_.compared += later.compared;
  metrics_.mismatch_count += later.mismatch_count;
  metrics_.rows_differing += later.rows_differing;
  metrics_.max_abs_diff = std::max(metrics_.max_abs_diff, later.max_abs_diff);
  metrics_.max_rel_diff = std::max(metrics_.max_rel_diff, later.max_rel_diff);
  metrics_.max_ulp_distance = std::max(metrics_.max_ulp_distance, later.max_ulp_distance);
  if (!metrics_.first_mismatch) metrics_.first_mismatch = later.first_mismatch;
  for (std::int64_t row : later.differing_rows) {
    if (metrics_.differing_rows.size() >= max_listed_rows) break;
    metrics_.differing_rows.push_back(row);
  }
}

DriftMetrics compare_all_rows(const std::string& tensor, DType dtype, const Tensor& expected,
                              const Tensor& actual) {
  const std::int64_t rows = expected.rows();
  const std::size_t row_bytes =
      static_cast<std::size_t>(expected.row_size()) * dtype_size(expected.dtype());
  const std::size_t bytes = static_cast<std::size_t>(rows) * row_bytes;
  constexpr std::size_t part_bytes = std::size_t(8) << 20;
  const std::size_t parts =
      bytes < 2 * part_bytes
          ? 1
          : std::min(static_cast<std::size_t>(rows), (bytes + part_bytes - 1) / part_bytes);
  const std::int64_t step = (rows + static_cast<std::int64_t>(parts) - 1) /
                            std::max<std::int64_t>(1, static_cast<std::int64_t>(parts));
  std::vector<DriftComparator> comparators(parts, DriftComparator(tensor, dtype));
  run_on_threads(parts, parts <= 1 ? 1 : threads_for(parts), [&](std::size_t p) {
    const std::int64_t first = std::min(rows, static_cast<std::int64_t>(p) * step);
    const std::int64_t last = std::min(rows, first + step);
    for (std::int64_t row = first; row < last; ++row)
      comparators[p].compare_row(row, expected, row, actual, row);
  });
  DriftComparator merged = comparators.front();
  for (std::size_t p = 1; p < parts; ++p) merged.append(comparators[p].metrics());
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
  // The metrics of rows [first, last), and the excess of its worst element (-1: none).
  struct Part {
    AccuracyMetrics metrics;
    double worst_excess = -1.0;
  };
  auto scan = [&](std::size_t first, std::size_t last, Part& part) {
    AccuracyMetrics& metrics = part.metrics;
    double& worst_excess = part.worst_excess;
    // A row's values decoded in one pass each (every column, or the sampled ones).
    std::vector<float> actual_row(static_cast<std::size_t>(reference_width)),
        reference_row(static_cast<std::size_t>(reference_width));
    for (std::size_t i = first; i < last; ++i) {
      get_range(reference, static_cast<std::int64_t>(i) * reference_width, reference_width,
                reference_row.data());
      if (sampled) {
        for (std::int64_t j = 0; j < reference_width; ++j)
          actual_row[static_cast<std::size_t>(j)] =
              actual.get(actual_rows[i] * width + columns[static_cast<std::size_t>(j)]);
      } else {
        get_range(actual, actual_rows[i] * width, reference_width, actual_row.data());
      }
      for (std::int64_t j = 0; j < reference_width; ++j) {
        std::int64_t column = sampled ? columns[static_cast<std::size_t>(j)] : j;
        std::int64_t a_index = actual_rows[i] * width + column;
        std::int64_t r_index = static_cast<std::int64_t>(i) * reference_width + j;
        double a = actual_row[static_cast<std::size_t>(j)],
               r = reference_row[static_cast<std::size_t>(j)];
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
    }
  };
  // Large checks (vocab-sized gradients) in fixed parts of rows, each on a thread, merged in row
  // order: counts add, maxima are maxima, and the worst is the first of the largest excess, as one
  // pass in row order finds it.
  const std::size_t rows = actual_rows.size();
  const std::size_t elements = rows * static_cast<std::size_t>(reference_width);
  constexpr std::size_t part_elements = std::size_t(1) << 21;
  const std::size_t parts = elements < 2 * part_elements
                                ? 1
                                : std::min(rows, (elements + part_elements - 1) / part_elements);
  std::vector<Part> results(parts);
  const std::size_t step = (rows + parts - 1) / std::max<std::size_t>(parts, 1);
  run_on_threads(parts, parts <= 1 ? 1 : threads_for(parts), [&](std::size_t p) {
    scan(std::min(rows, p * step), std::min(rows, (p + 1) * step), results[p]);
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
