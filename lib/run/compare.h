// The three checks' arithmetic: bitwise drift metrics between two presentations of the same rows,
// accuracy against the FP32 reference with (atol, rtol), and output fingerprints.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace bitcheck {

struct Mismatch {
  std::int64_t row = 0;     // logical row (or reduction-tensor row)
  std::int64_t column = 0;  // flat index within the row
  float expected = 0.f, actual = 0.f;
  std::uint32_t expected_bits = 0, actual_bits = 0;
};

// Bitwise comparison of `actual` against `expected` (tolerance zero). The magnitudes describe how
// far the drift went; any differing bit, a NaN payload included, is a mismatch.
struct DriftMetrics {
  std::string layout;  // the layout compared against the canonical one (or "repeat N")
  std::string reference_layout;
  std::string tensor;
  DType dtype = DType::fp32;
  std::int64_t compared = 0;
  std::int64_t mismatch_count = 0;
  std::int64_t rows_differing = 0;
  double max_abs_diff = 0.0;
  double max_rel_diff = 0.0;
  std::uint64_t max_ulp_distance = 0;
  std::optional<Mismatch> first_mismatch;
  std::vector<std::int64_t> differing_rows;  // first few, for the report
  bool drifted() const { return mismatch_count > 0; }
};

class DriftComparator {
 public:
  DriftComparator(std::string tensor, DType dtype);
  // Compares one row of each tensor (row indices into each tensor; `logical_row` for the report).
  void compare_row(std::int64_t logical_row, const Tensor& expected, std::int64_t expected_row,
                   const Tensor& actual, std::int64_t actual_row);
  // Columns [first_column, last_column) of one row: a row compared in consecutive spans counts
  // once however many of them differ.
  void compare_span(std::int64_t logical_row, const Tensor& expected, std::int64_t expected_row,
                    const Tensor& actual, std::int64_t actual_row, std::int64_t first_column,
                    std::int64_t last_column);
  // `elements` compared elsewhere and found bitwise equal (rows compared on a device): all that
  // compare_row records of an equal row.
  void add_equal(std::int64_t elements) { metrics_.compared += elements; }
  const DriftMetrics& metrics() const { return metrics_; }
  // Adds what `later` compared after this comparator (a later part of the same tensor, which may
  // begin inside this one's last row): the result is that of one comparator over both in order.
  void append(const DriftComparator& later);

 private:
  DriftMetrics metrics_;
  std::int64_t first_differing_row_ = -1, last_differing_row_ = -1;
};

// Every row of `actual` against the same row of `expected` (same shape and dtype), as one
// DriftComparator in row order. Large tensors (a vocabulary-sized gradient: gigabytes, one row of
// it when the chain flattens it) are compared in fixed parts of elements on threads
// (core/host_threads.h), merged in order: the same metrics.
DriftMetrics compare_all_rows(const std::string& tensor, DType dtype, const Tensor& expected,
                              const Tensor& actual);

struct AccuracyMetrics {
  std::string tensor;
  std::int64_t compared = 0;
  std::int64_t violations = 0;
  // NaN the rules reject: any NaN by default; with special values, a NaN in the output where the
  // reference has none or a reference NaN the output does not reproduce.
  std::int64_t nan_count = 0;
  std::int64_t nonfinite_matched = 0;  // reference NaN / +-Inf reproduced by the output
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  double atol = 0.0, rtol = 0.0;
  std::optional<Mismatch> worst;  // largest excess over the threshold (expected = reference)
  bool passed() const { return violations == 0 && nan_count == 0; }
};

// How accuracy treats non-finite values (the contract's "special_values" section applies when a
// case's inputs hold special values). A reference +-Inf must always be the same infinity in the
// output, and an output infinity where the reference is finite always fails. By default NaN never
// passes; with nan_matches_reference a reference NaN must be NaN in the output (any payload: the
// payload is the invariance check's business) and an output NaN elsewhere still fails.
struct NonFiniteRules {
  bool nan_matches_reference = false;
};

// |actual - reference| <= atol + rtol * |reference| for every element with a finite reference,
// rows paired in order; non-finite values as `rules` says. -0 and +0 are equal here (invariance
// tells them apart). `columns`: when the reference holds only these columns of each row (its width
// equals their count), element j of a reference row is column columns[j] of the output row.
AccuracyMetrics check_accuracy(const std::string& tensor, const Tensor& actual,
                               const std::vector<std::int64_t>& actual_rows,
                               const Tensor& reference, const std::vector<std::int64_t>& row_ids,
                               double atol, double rtol,
                               const std::vector<std::int64_t>& columns = {},
                               const NonFiniteRules& rules = {});

// 64-bit FNV-1a over the raw bytes: equal fingerprints <=> (almost surely) equal bits.
std::uint64_t fingerprint_bytes(const void* data, std::size_t bytes, std::uint64_t seed = 0);
// fingerprint_bytes chained over the rows `rows` of a tensor in order, from `seed`: the output
// fingerprint's part for one row tensor (the device computes the same, common/row_compare.h).
std::uint64_t fingerprint_rows(const Tensor& tensor, const std::vector<std::int64_t>& rows,
                               std::uint64_t seed);
std::string fingerprint_hex(std::uint64_t fingerprint);

}  // namespace bitcheck
