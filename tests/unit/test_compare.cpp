// Drift metrics on hand-built tensors (every field, bf16/fp16/fp32, NaN payloads, signed zeros),
// the accuracy check's (atol, rtol) boundary and NaN rule, and output fingerprints.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "report/report.h"
#include "run/compare.h"
#include "unit/case_support.h"

using namespace bitcheck;

namespace {

using case_support::from_bits;
using case_support::from_values;

DriftMetrics compare_all(const std::string& name, const Tensor& expected, const Tensor& actual,
                         std::int64_t first_logical_row = 0) {
  DriftComparator comparator(name, expected.dtype());
  for (std::int64_t row = 0; row < expected.rows(); ++row) {
    comparator.compare_row(first_logical_row + row, expected, row, actual, row);
  }
  return comparator.metrics();
}

}  // namespace

TEST_CASE("identical bits are no drift", "[compare]") {
  Tensor a = from_values(DType::bf16, 2, {1.0f, -2.5f, 0.125f, 3.0f});
  DriftMetrics metrics = compare_all("y", a, a);
  CHECK(metrics.compared == 4);
  CHECK(metrics.mismatch_count == 0);
  CHECK(metrics.rows_differing == 0);
  CHECK_FALSE(metrics.drifted());
  CHECK_FALSE(metrics.first_mismatch.has_value());
  CHECK(metrics.max_abs_diff == 0.0);
  CHECK(metrics.max_ulp_distance == 0);
}

TEST_CASE("bf16 drift metrics: counts, magnitudes, ULPs and the first mismatch",
          "[compare][bf16]") {
  // Logical rows 10 and 11; row 11 differs by 1 ulp at column 1 and 2 ulps at column 2.
  Tensor expected = from_bits(DType::bf16, 2,
                              {0x3f80, 0x4000, 0x4040, 0x4080,    // 1, 2, 3, 4
                               0x3f00, 0xbf80, 0x4100, 0x3e80});  // .5, -1, 8, .25
  Tensor actual = from_bits(
      DType::bf16, 2,
      {0x3f80, 0x4000, 0x4040, 0x4080, 0x3f00, 0xbf81, 0x4102, 0x3e80});  // -1.0078125, 8.125
  DriftMetrics metrics = compare_all("y", expected, actual, 10);
  CHECK(metrics.tensor == "y");
  CHECK(metrics.compared == 8);
  CHECK(metrics.mismatch_count == 2);
  CHECK(metrics.rows_differing == 1);
  CHECK(metrics.differing_rows == std::vector<std::int64_t>{11});
  CHECK(metrics.max_abs_diff == 0.125);
  CHECK(metrics.max_rel_diff == 0.015625);
  CHECK(metrics.max_ulp_distance == 2);
  REQUIRE(metrics.first_mismatch.has_value());
  const Mismatch& first = *metrics.first_mismatch;
  CHECK(first.row == 11);
  CHECK(first.column == 1);
  CHECK(first.expected == -1.0f);
  CHECK(first.actual == -1.0078125f);
  CHECK(first.expected_bits == 0xbf80u);
  CHECK(first.actual_bits == 0xbf81u);

  nlohmann::json j = drift_to_json(metrics);
  CHECK(j["first_mismatch"]["expected_bits"] == "0xbf80");
  CHECK(j["first_mismatch"]["actual_bits"] == "0xbf81");
  CHECK(j["first_mismatch"]["row"] == 11);
  CHECK(j["first_mismatch"]["column"] == 1);
  CHECK(j["max_abs_diff"] == 0.125);
  CHECK(j["max_ulp_distance"] == 2);
  CHECK(j["mismatch_count"] == 2);
  CHECK(j["dtype"] == "bf16");
}

TEST_CASE("fp16 drift metrics, including a sign flip across zero", "[compare][fp16]") {
  const float unit = std::ldexp(1.0f, -24);
  Tensor expected = from_bits(DType::fp16, 1, {0x3c00, 0x0001, 0x5640});  // 1, 2^-24, 100
  Tensor actual = from_bits(DType::fp16, 1, {0x3c01, 0x8001, 0x5640});    // 1+2^-10, -2^-24, 100
  DriftMetrics metrics = compare_all("dx", expected, actual);
  CHECK(metrics.mismatch_count == 2);
  CHECK(metrics.rows_differing == 1);
  CHECK(metrics.max_abs_diff == std::ldexp(1.0, -10));
  CHECK(metrics.max_rel_diff == 2.0);  // 2 units off a 1-unit value
  CHECK(metrics.max_ulp_distance == 2);
  REQUIRE(metrics.first_mismatch.has_value());
  CHECK(metrics.first_mismatch->column == 0);
  CHECK(metrics.first_mismatch->actual == 1.0009765625f);
  CHECK(drift_to_json(metrics)["first_mismatch"]["actual_bits"] == "0x3c01");
  CHECK(decode_bits(DType::fp16, 0x8001) == -unit);
}

TEST_CASE("fp32 drift metrics", "[compare][fp32]") {
  const float next = std::nextafter(1.0f, 2.0f);
  Tensor expected = from_values(DType::fp32, 2, {1.0f, 3.0f, 5.0f, 7.0f});
  Tensor actual = from_values(DType::fp32, 2, {next, 3.0f, 5.0f, 7.5f});
  DriftMetrics metrics = compare_all("dw", expected, actual);
  CHECK(metrics.mismatch_count == 2);
  CHECK(metrics.rows_differing == 2);
  CHECK(metrics.differing_rows == std::vector<std::int64_t>{0, 1});
  CHECK(metrics.max_abs_diff == 0.5);
  CHECK(metrics.max_rel_diff == Approx(0.5 / 7.0));
  CHECK(metrics.max_ulp_distance == 0x100000);  // 0.5 at 7.0: 2^-1 / 2^-21
  REQUIRE(metrics.first_mismatch.has_value());
  CHECK(metrics.first_mismatch->row == 0);
  CHECK(metrics.first_mismatch->expected_bits == 0x3f800000u);
  CHECK(metrics.first_mismatch->actual_bits == 0x3f800001u);
  nlohmann::json j = drift_to_json(metrics);
  CHECK(j["first_mismatch"]["expected_bits"] == "0x3f800000");
  CHECK(j["first_mismatch"]["actual_bits"] == "0x3f800001");
}

TEST_CASE("signed zeros: +0 against -0 is a mismatch of 0 ulp", "[compare]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    Tensor positive = from_values(dtype, 1, {0.0f, 1.0f});
    Tensor negative = from_values(dtype, 1, {-0.0f, 1.0f});
    DriftMetrics metrics = compare_all("y", positive, negative);
    INFO(to_string(dtype));
    CHECK(metrics.drifted());
    CHECK(metrics.mismatch_count == 1);
    CHECK(metrics.max_ulp_distance == 0);
    CHECK(metrics.max_abs_diff == 0.0);
    REQUIRE(metrics.first_mismatch.has_value());
    CHECK(metrics.first_mismatch->expected_bits != metrics.first_mismatch->actual_bits);
  }
}

TEST_CASE("NaN payload differences and NaN against numbers are mismatches", "[compare]") {
  SECTION("different NaN payloads") {
    Tensor a = from_bits(DType::fp32, 1, {0x7fc00000u, 0x3f800000u});
    Tensor b = from_bits(DType::fp32, 1, {0x7fc00001u, 0x3f800000u});
    DriftMetrics metrics = compare_all("y", a, b);
    CHECK(metrics.mismatch_count == 1);
    REQUIRE(metrics.first_mismatch.has_value());
    CHECK(metrics.first_mismatch->expected_bits == 0x7fc00000u);
    CHECK(metrics.first_mismatch->actual_bits == 0x7fc00001u);
  }
  SECTION("bf16 NaN payloads") {
    Tensor a = from_bits(DType::bf16, 1, {0x7fc0});
    Tensor b = from_bits(DType::bf16, 1, {0xffc0});
    CHECK(compare_all("y", a, b).mismatch_count == 1);
  }
  SECTION("a NaN where a number was expected is infinitely far") {
    Tensor a = from_values(DType::bf16, 1, {1.0f, 2.0f});
    Tensor b = from_bits(DType::bf16, 1, {0x3f80, 0x7fc0});
    DriftMetrics metrics = compare_all("y", a, b);
    CHECK(metrics.mismatch_count == 1);
    CHECK(metrics.max_ulp_distance == std::numeric_limits<std::uint64_t>::max());
    CHECK(std::isinf(metrics.max_abs_diff));
    CHECK(drift_to_json(metrics)["max_abs_diff"] == "inf");  // JSON has no Inf
  }
}

TEST_CASE("compare_row pairs rows by index in each tensor", "[compare]") {
  // The actual tensor holds the same row at a different physical position.
  Tensor expected = from_values(DType::bf16, 1, {1.0f, 2.0f});
  Tensor actual = from_values(DType::bf16, 3, {9.0f, 9.0f, 9.0f, 9.0f, 1.0f, 2.0f});
  DriftComparator comparator("y", DType::bf16);
  comparator.compare_row(5, expected, 0, actual, 2);
  CHECK_FALSE(comparator.metrics().drifted());
  comparator.compare_row(6, expected, 0, actual, 1);
  CHECK(comparator.metrics().mismatch_count == 2);
  CHECK(comparator.metrics().first_mismatch->row == 6);
}

TEST_CASE("check_accuracy reads each dtype's bits as that dtype, every column and sampled ones",
          "[compare][accuracy]") {
  // Exact in every dtype; read as the other 16-bit dtype, a bf16 or fp16 element would be another
  // number entirely.
  const std::vector<float> values = {1.5f, -3.0625f, 256.0f, 0.0f};
  std::vector<std::int64_t> rows = {1}, ids = {7};
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    INFO(to_string(dtype));
    Tensor actual(dtype, {2, 4});
    for (std::int64_t c = 0; c < 4; ++c) {
      actual.set(c, 100.0f);  // row 0 is not the row checked
      actual.set(4 + c, values[static_cast<std::size_t>(c)]);
    }
    Tensor reference = from_values(DType::fp32, 1, values);
    AccuracyMetrics every = check_accuracy("y", actual, rows, reference, ids, 0.0, 0.0);
    CHECK(every.compared == 4);
    CHECK(every.violations == 0);
    CHECK(every.max_abs_error == 0.0);
    // Sampled columns 2 and 0: the reference holds those two, in that order.
    Tensor sampled_reference = from_values(DType::fp32, 1, {values[2], values[0]});
    AccuracyMetrics sampled =
        check_accuracy("y", actual, rows, sampled_reference, ids, 0.0, 0.0, {2, 0});
    CHECK(sampled.compared == 2);
    CHECK(sampled.violations == 0);
    // One element off by one ulp of its dtype is the worst, named by row and column.
    actual.set_bits(4 + 1, actual.bits(4 + 1) + 1);
    AccuracyMetrics off = check_accuracy("y", actual, rows, reference, ids, 0.0, 0.0);
    CHECK(off.violations == 1);
    REQUIRE(off.worst.has_value());
    CHECK(off.worst->row == 7);
    CHECK(off.worst->column == 1);
  }
}

TEST_CASE("check_accuracy: atol + rtol * |reference| is inclusive, just outside fails",
          "[compare][accuracy]") {
  const double atol = 0.25, rtol = 0.5;  // binary fractions: the boundary is exact
  Tensor reference = from_values(DType::fp32, 1, {2.0f, -4.0f, 0.0f});
  std::vector<std::int64_t> rows = {0}, ids = {42};
  SECTION("on the boundary passes") {
    Tensor actual = from_values(DType::fp32, 1, {3.25f, -6.25f, -0.25f});
    AccuracyMetrics metrics = check_accuracy("y", actual, rows, reference, ids, atol, rtol);
    CHECK(metrics.compared == 3);
    CHECK(metrics.violations == 0);
    CHECK(metrics.nan_count == 0);
    CHECK(metrics.passed());
    CHECK(metrics.max_abs_error == 2.25);
    CHECK_FALSE(metrics.worst.has_value());
  }
  SECTION("one fp32 ulp beyond the boundary fails, naming the worst element") {
    Tensor actual = from_values(DType::fp32, 1, {std::nextafter(3.25f, 4.0f), -6.25f, 0.0f});
    AccuracyMetrics metrics = check_accuracy("y", actual, rows, reference, ids, atol, rtol);
    CHECK(metrics.violations == 1);
    CHECK_FALSE(metrics.passed());
    REQUIRE(metrics.worst.has_value());
    CHECK(metrics.worst->row == 42);
    CHECK(metrics.worst->column == 0);
    CHECK(metrics.worst->expected == 2.0f);
    CHECK(metrics.worst->actual == std::nextafter(3.25f, 4.0f));
  }
  SECTION("NaN never passes, in the output or the reference") {
    Tensor actual = from_values(DType::fp32, 1, {2.0f, std::nanf(""), 0.0f});
    AccuracyMetrics metrics = check_accuracy("y", actual, rows, reference, ids, 1e9, 1e9);
    CHECK(metrics.nan_count == 1);
    CHECK_FALSE(metrics.passed());
    Tensor nan_reference = from_values(DType::fp32, 1, {std::nanf(""), -4.0f, 0.0f});
    Tensor exact = from_values(DType::fp32, 1, {2.0f, -4.0f, 0.0f});
    AccuracyMetrics against_nan = check_accuracy("y", exact, rows, nan_reference, ids, 1e9, 1e9);
    CHECK(against_nan.nan_count == 1);
    CHECK_FALSE(against_nan.passed());
  }
  SECTION("an infinite output is never within tolerance of a finite reference") {
    Tensor actual =
        from_values(DType::fp32, 1, {std::numeric_limits<float>::infinity(), -4.0f, 0.0f});
    AccuracyMetrics metrics = check_accuracy("y", actual, rows, reference, ids, 1e30, 1e30);
    CHECK_FALSE(metrics.passed());
  }
}

TEST_CASE("check_accuracy pairs actual rows with reference rows in order", "[compare][accuracy]") {
  Tensor actual = from_values(DType::bf16, 3, {1.0f, 1.0f, 9.0f, 9.0f, 3.0f, 3.0f});
  Tensor reference = from_values(DType::fp32, 2, {3.0f, 3.0f, 1.0f, 1.5f});
  AccuracyMetrics metrics = check_accuracy("y", actual, {2, 0}, reference, {7, 5}, 0.0, 0.0);
  CHECK(metrics.compared == 4);
  CHECK(metrics.violations == 1);
  REQUIRE(metrics.worst.has_value());
  CHECK(metrics.worst->row == 5);
  CHECK(metrics.worst->column == 1);
  CHECK(metrics.max_abs_error == 0.5);
}

TEST_CASE("fingerprints change with any bit and are printed as 16 hex digits", "[compare]") {
  std::vector<std::uint8_t> bytes = {1, 2, 3, 4, 5};
  std::uint64_t base = fingerprint_bytes(bytes.data(), bytes.size());
  CHECK(fingerprint_bytes(bytes.data(), bytes.size()) == base);
  bytes[4] ^= 0x01;
  CHECK(fingerprint_bytes(bytes.data(), bytes.size()) != base);
  CHECK(fingerprint_bytes(bytes.data(), bytes.size(), 1) !=
        fingerprint_bytes(bytes.data(), bytes.size(), 2));
  CHECK(fingerprint_hex(0x1234) == "0000000000001234");
  CHECK(fingerprint_hex(base).size() == 16);
}

TEST_CASE("a fingerprint of rows moves with every byte of every listed row, and only those",
          "[compare]") {
  constexpr std::int64_t rows = 6, width = 3;
  std::vector<float> values(static_cast<std::size_t>(rows * width));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + static_cast<float>(i) / 4;
  const Tensor tensor = from_values(DType::bf16, rows, values);
  const std::vector<std::int64_t> listed = {0, 2, 5};
  const std::uint64_t base = fingerprint_rows(tensor, listed, 7);
  // The chain of the rows' bytes, row by row from the seed.
  std::uint64_t chained = 7;
  for (std::int64_t row : listed)
    chained = fingerprint_bytes(static_cast<const std::uint8_t*>(tensor.data()) + row * width * 2,
                                width * 2, chained);
  CHECK(base == chained);
  CHECK(fingerprint_rows(tensor, listed, 8) != base);
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t byte = 0; byte < width * 2; ++byte) {
      Tensor changed = tensor;
      static_cast<std::uint8_t*>(changed.data())[row * width * 2 + byte] ^= 0x01;
      const bool is_listed = row == 0 || row == 2 || row == 5;
      CAPTURE(row, byte);
      CHECK((fingerprint_rows(changed, listed, 7) != base) == is_listed);
    }
  }
}

TEST_CASE("check_accuracy in parts on threads: the one pass's counts, maxima and first worst",
          "[compare]") {
  // 4096 x 1024: large enough to be checked in parts.
  const std::int64_t rows = 4096, width = 1024;
  Tensor reference(DType::fp32, {rows, width}), actual(DType::fp32, {rows, width});
  for (std::int64_t i = 0; i < rows * width; ++i) {
    const float value = static_cast<float>(i % 977) / 977.0f;
    reference.set(i, value);
    actual.set(i, value + 1e-4f);  // within atol 1e-3 everywhere but where planted
  }
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) ids[static_cast<std::size_t>(r)] = r;
  auto plant = [&](std::int64_t row, std::int64_t column, float error) {
    actual.set(row * width + column, reference.get(row * width + column) + error);
  };
  plant(100, 5, 0.5f);  // two equal excesses: the first in row order is the worst
  plant(3000, 7, 0.5f);
  for (const char* threads : {"1", "3"}) {
    setenv("BITCHECK_HOST_THREADS", threads, 1);
    const AccuracyMetrics metrics = check_accuracy("y", actual, ids, reference, ids, 1e-3, 0.0);
    INFO("threads " << threads);
    CHECK(metrics.compared == rows * width);
    CHECK(metrics.violations == 2);
    REQUIRE(metrics.worst);
    CHECK(metrics.worst->row == 100);
    CHECK(metrics.worst->column == 5);
    CHECK(metrics.max_abs_error == Approx(0.5).margin(1e-6));
  }
  plant(3500, 9, 2.0f);  // a larger excess in a later part wins
  actual.set(2000 * width + 3, std::numeric_limits<float>::quiet_NaN());  // a NaN wins over all
  for (const char* threads : {"1", "3"}) {
    setenv("BITCHECK_HOST_THREADS", threads, 1);
    const AccuracyMetrics metrics = check_accuracy("y", actual, ids, reference, ids, 1e-3, 0.0);
    INFO("threads " << threads);
    CHECK(metrics.violations == 3);
    CHECK(metrics.nan_count == 1);
    REQUIRE(metrics.worst);
    CHECK(metrics.worst->row == 2000);
    CHECK(metrics.worst->column == 3);
    CHECK(metrics.max_abs_error == Approx(2.0).margin(1e-5));
  }
  unsetenv("BITCHECK_HOST_THREADS");
}

TEST_CASE("compare_all_rows in parts on threads: the one pass's counts, maxima and rows in order",
          "[compare]") {
  // 4096 x 2048 fp32 (32 MB): compared in parts.
  const std::int64_t rows = 4096, width = 2048;
  Tensor expected(DType::fp32, {rows, width});
  for (std::int64_t i = 0; i < rows * width; ++i) expected.set(i, static_cast<float>(i % 977));
  Tensor actual = expected;
  auto flip = [&](std::int64_t row, std::int64_t column, std::uint32_t ulps) {
    const std::int64_t i = row * width + column;
    actual.set_bits(i, expected.bits(i) + ulps);
  };
  // Rows across every part, more than the 16 listed; the largest distance in a late part.
  std::vector<std::int64_t> planted;
  for (std::int64_t row = 100; row < rows; row += 197) planted.push_back(row);
  for (std::int64_t row : planted) flip(row, 5, 1);
  flip(planted.front(), 9, 2);
  flip(3999, 11, 40);
  std::vector<std::int64_t> expected_listed(planted.begin(), planted.begin() + 16);
  std::optional<DriftMetrics> one_thread;
  for (const char* threads : {"1", "3", "8"}) {
    setenv("BITCHECK_HOST_THREADS", threads, 1);
    const DriftMetrics metrics = compare_all_rows("dw", DType::fp32, expected, actual);
    INFO("threads " << threads);
    CHECK(metrics.compared == rows * width);
    CHECK(metrics.mismatch_count == static_cast<std::int64_t>(planted.size()) + 2);
    CHECK(metrics.rows_differing == static_cast<std::int64_t>(planted.size()) + 1);
    CHECK(metrics.max_ulp_distance == 40);
    CHECK(metrics.differing_rows == expected_listed);
    REQUIRE(metrics.first_mismatch);
    CHECK(metrics.first_mismatch->row == planted.front());
    CHECK(metrics.first_mismatch->column == 5);
    if (!one_thread) one_thread = metrics;
    CHECK(metrics.max_abs_diff == one_thread->max_abs_diff);
    CHECK(metrics.max_rel_diff == one_thread->max_rel_diff);
  }
  unsetenv("BITCHECK_HOST_THREADS");
}

TEST_CASE("one long row in parts (a chain's flattened gradient): counted once, worst in order",
          "[compare]") {
  // 1 x 8M fp32 (32 MB): compared and checked in parts that each hold a piece of the one row.
  const std::int64_t width = std::int64_t(8) << 20;
  Tensor expected(DType::fp32, {1, width});
  for (std::int64_t i = 0; i < width; ++i) expected.set(i, static_cast<float>(i % 977) + 1.0f);
  Tensor actual = expected;
  const std::vector<std::int64_t> planted = {5, 3 << 20, (5 << 20) + 7, width - 1};
  for (std::int64_t column : planted) actual.set_bits(column, expected.bits(column) + 3);
  std::vector<std::int64_t> row0 = {0};
  for (const char* threads : {"1", "3"}) {
    setenv("BITCHECK_HOST_THREADS", threads, 1);
    INFO("threads " << threads);
    const DriftMetrics drift = compare_all_rows("dtable", DType::fp32, expected, actual);
    CHECK(drift.compared == width);
    CHECK(drift.mismatch_count == 4);
    CHECK(drift.rows_differing == 1);
    CHECK(drift.differing_rows == row0);
    CHECK(drift.max_ulp_distance == 3);
    REQUIRE(drift.first_mismatch);
    CHECK(drift.first_mismatch->column == 5);
    // Against itself as the reference, atol 0: the planted elements violate; the first of the
    // largest excess is the worst.
    const AccuracyMetrics accuracy =
        check_accuracy("dtable", actual, row0, expected, row0, 0.0, 0.0);
    CHECK(accuracy.compared == width);
    CHECK(accuracy.violations == 4);
    REQUIRE(accuracy.worst);
    CHECK(accuracy.worst->row == 0);
    CHECK(accuracy.worst->column == 3 << 20);  // 3 ulps of 766, the largest planted value
  }
  unsetenv("BITCHECK_HOST_THREADS");
}
