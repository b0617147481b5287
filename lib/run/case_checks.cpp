// The three checks of a case, each a function of the outputs it compares: invariance (bits
// against the canonical layouts), determinism (canonical repeats) and accuracy (FP32 reference).
#include "run/case_checks.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include "run/layout.h"

namespace bitcheck {
namespace {

bool is_output(const TensorDecl& decl) {
  return decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
}

DriftMetrics named(DriftMetrics metrics, const std::string& layout,
                   const std::string& reference_layout) {
  metrics.layout = layout;
  metrics.reference_layout = reference_layout;
  return metrics;
}

DriftMetrics compare_whole(const std::string& layout, const std::string& reference_layout,
                           const TensorDecl& decl, const Tensor& expected, const Tensor& actual) {
  return named(compare_all_rows(decl.name, decl.dtype, expected, actual), layout, reference_layout);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The parts an output left on the device is compared in: a differing part costs nothing more
// (a drift brings the whole output over, for its metrics), so the size only spreads the work.
constexpr std::size_t device_part_bytes = std::size_t(1) << 16;

std::uint64_t bytes_read(const DriftMetrics& metrics) {
  return 2 * static_cast<std::uint64_t>(metrics.compared) * dtype_size(metrics.dtype);
}

// Output `decl` where both layouts left it on the device, compared whole there: the host
// comparison's metrics when every bit is equal (every element compared, none differing), nullopt
// when a part differs or a side is on the host only.
std::optional<DriftMetrics> equal_on_device(const TensorDecl& decl, const LayoutOutputs& expected,
                                            const LayoutOutputs& actual, DeviceWork& work) {
  const auto e = expected.on_device.find(decl.name);
  const auto a = actual.on_device.find(decl.name);
  if (e == expected.on_device.end() || a == actual.on_device.end()) return std::nullopt;
  const auto start = Clock::now();
  const bool equal = a->second->differing_parts(*e->second, device_part_bytes).empty();
  work.compare_seconds += seconds_since(start);
  work.compared_bytes += e->second->bytes() + a->second->bytes();
  if (!equal) return std::nullopt;
  DriftComparator none(decl.name, decl.dtype);
  DriftMetrics metrics = none.metrics();
  metrics.compared = shape_elements(decl);
  if (decl.role == TensorRole::row_output)
    metrics.compared *= static_cast<std::int64_t>(actual.present.size());
  work.settled_bytes += bytes_read(metrics);
  return metrics;
}

bool has_output(const LayoutOutputs& outputs, const TensorDecl& decl) {
  const auto& host = decl.role == TensorRole::row_output ? outputs.rows : outputs.reductions;
  return host.count(decl.name) || outputs.on_device.count(decl.name);
}

// `rows` of row output `decl` in `actual` against the same rows in `expected`, in order. Where
// both layouts left it on the device and `actual` has no host copy, the rows are compared there:
// only the rows that differ come to the host, and each equal row counts as compared, which is
// all the host comparison records of it. `expected` is on the host (a canonical layout).
DriftMetrics compare_rows(const std::string& layout, const std::string& reference_layout,
                          const TensorDecl& decl, const LayoutOutputs& expected,
                          LayoutOutputs& actual, const std::vector<std::int64_t>& rows,
                          DeviceWork& work) {
  DriftComparator comparator(decl.name, decl.dtype);
  const auto e = expected.on_device.find(decl.name);
  const auto a = actual.on_device.find(decl.name);
  if (!actual.rows.count(decl.name) && e != expected.on_device.end() &&
      a != actual.on_device.end()) {
    const std::int64_t width = shape_elements(decl);
    const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(decl.dtype);
    auto start = Clock::now();
    const std::vector<std::int64_t> differing = a->second->differing_parts(*e->second, row_bytes);
    work.compare_seconds += seconds_since(start);
    work.compared_bytes += e->second->bytes() + a->second->bytes();
    std::vector<std::int64_t> wanted;  // the compared rows that differ, in order
    std::set_intersection(rows.begin(), rows.end(), differing.begin(), differing.end(),
                          std::back_inserter(wanted));
    start = Clock::now();
    std::vector<std::int64_t> shape = {static_cast<std::int64_t>(wanted.size())};
    shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
    Tensor fetched(decl.dtype, shape);
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      a->second->read(static_cast<unsigned char*>(fetched.data()) + i * row_bytes,
                      static_cast<std::size_t>(wanted[i]) * row_bytes, row_bytes);
    }
    work.fetch_seconds += seconds_since(start);
    work.fetched_bytes += fetched.bytes();
    const Tensor& host = expected.rows.at(decl.name);
    std::size_t next = 0;
    for (std::int64_t row : rows) {
      if (next < wanted.size() && wanted[next] == row) {
        comparator.compare_row(row, host, row, fetched, static_cast<std::int64_t>(next++));
      } else {
        comparator.add_equal(width);
        work.settled_bytes += 2 * row_bytes;
      }
    }
    return named(comparator.metrics(), layout, reference_layout);
  }
  bring_to_host(actual, decl, work);
  for (std::int64_t row : rows) {
    comparator.compare_row(row, expected.rows.at(decl.name), row, actual.rows.at(decl.name), row);
  }
  return named(comparator.metrics(), layout, reference_layout);
}

void record(DriftMetrics metrics, InvarianceResult& result) {
  ++result.comparisons;
  result.compared_bytes += bytes_read(metrics);
  if (metrics.drifted()) result.drift.push_back(std::move(metrics));
}

// Rows of a layout compared against alone (those in the alone sample) and against the batch.
void check_row_output(const TensorDecl& decl, const std::string& layout, LayoutOutputs& outputs,
                      const CanonicalOutputs& canonical, InvarianceResult& result) {
  std::vector<std::int64_t> against_alone, against_batch;
  for (std::size_t row = 0; row < outputs.present.size(); ++row) {
    if (!outputs.present[row]) continue;
    if (canonical.alone->present[row]) {
      against_alone.push_back(static_cast<std::int64_t>(row));
    } else if (canonical.batch && layout != canonical_reduction_layout) {
      against_batch.push_back(static_cast<std::int64_t>(row));
    }
  }
  record(compare_rows(layout, canonical.rows_layout, decl, *canonical.alone, outputs, against_alone,
                      result.device),
         result);
  if (!against_batch.empty()) {
    record(compare_rows(layout, canonical_reduction_layout, decl, *canonical.batch, outputs,
                        against_batch, result.device),
           result);
  }
}

}  // namespace

std::int64_t shape_elements(const TensorDecl& decl) {
  std::int64_t count = 1;
  for (std::int64_t extent : decl.shape) count *= extent;
  return count;
}

bool case_expected_to_drift(const Impl& impl, const CaseSpec& spec) {
  if (!impl.expected_to_drift(spec.pass) || spec.tp < impl.tensor_parallelism().drifts_from_tp)
    return false;
  const std::string& layout = impl.info().drifts_only_in_layout;
  return layout.empty() ||
         std::find(spec.layouts.begin(), spec.layouts.end(), layout) != spec.layouts.end();
}

void DeviceWork::append(const DeviceWork& other) {
  compare_seconds += other.compare_seconds;
  compared_bytes += other.compared_bytes;
  settled_bytes += other.settled_bytes;
  fetch_seconds += other.fetch_seconds;
  fetched_bytes += other.fetched_bytes;
}

void bring_to_host(LayoutOutputs& outputs, const TensorDecl& decl, DeviceWork& work) {
  const bool row = decl.role == TensorRole::row_output;
  auto& host = row ? outputs.rows : outputs.reductions;
  if (host.count(decl.name)) return;
  const auto held = outputs.on_device.find(decl.name);
  if (held == outputs.on_device.end())
    throw std::logic_error("the layout's outputs hold no " + decl.name);
  const auto start = Clock::now();
  std::vector<std::int64_t> shape = decl.shape;
  if (row) shape.insert(shape.begin(), static_cast<std::int64_t>(outputs.present.size()));
  // Zeroed first (on threads): a device copy into pages never touched runs at a third of the
  // speed (on an H200 host, 3.5 GB/s against 11 GB/s for the 8B chain's dtables).
  Tensor tensor(decl.dtype, shape);
  if (held->second->bytes() != tensor.bytes()) {
    throw std::logic_error(decl.name + " left on the device holds " +
                           std::to_string(held->second->bytes()) + " bytes, expected " +
                           std::to_string(tensor.bytes()));
  }
  held->second->read(tensor.data(), 0, tensor.bytes());
  work.fetch_seconds += seconds_since(start);
  work.fetched_bytes += tensor.bytes();
  host.emplace(decl.name, std::move(tensor));
}

void bring_all_to_host(LayoutOutputs& outputs, const std::vector<TensorDecl>& decls,
                       DeviceWork& work, bool rows, bool reductions) {
  for (const auto& decl : decls) {
    const bool wanted = decl.role == TensorRole::row_output         ? rows
                        : decl.role == TensorRole::reduction_output ? reductions
                                                                    : false;
    if (wanted && outputs.on_device.count(decl.name)) bring_to_host(outputs, decl, work);
  }
}

void InvarianceResult::append(InvarianceResult other) {
  comparisons += other.comparisons;
  compared_bytes += other.compared_bytes;
  device.append(other.device);
  for (auto& metrics : other.drift) drift.push_back(std::move(metrics));
}

void DeterminismResult::append(DeterminismResult other) {
  compared_bytes += other.compared_bytes;
  device.append(other.device);
  for (auto& metrics : other.nondeterminism) nondeterminism.push_back(std::move(metrics));
}

bool AccuracyResult::passed() const {
  return std::all_of(tensors.begin(), tensors.end(),
                     [](const AccuracyMetrics& metrics) { return metrics.passed(); });
}

InvarianceResult check_invariance(const std::vector<TensorDecl>& decls, const std::string& layout,
                                  bool covers_all_rows_in_order, LayoutOutputs& outputs,
                                  const CanonicalOutputs& canonical) {
  InvarianceResult result;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_output && layout != canonical.rows_layout) {
      check_row_output(decl, layout, outputs, canonical, result);
    }
    if (decl.role == TensorRole::reduction_output && layout != canonical_reduction_layout &&
        covers_all_rows_in_order) {
      if (auto equal = equal_on_device(decl, *canonical.batch, outputs, result.device)) {
        record(named(std::move(*equal), layout, canonical_reduction_layout), result);
        continue;
      }
      bring_to_host(outputs, decl, result.device);
      record(compare_whole(layout, canonical_reduction_layout, decl,
                           canonical.batch->reductions.at(decl.name),
                           outputs.reductions.at(decl.name)),
             result);
    }
  }
  return result;
}

InvarianceResult check_across_tp(const std::vector<TensorDecl>& decls, const std::string& layout,
                                 const std::string& reference_layout, LayoutOutputs& outputs,
                                 const LayoutOutputs& reference) {
  InvarianceResult result;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_output && has_output(outputs, decl) &&
        reference.rows.count(decl.name)) {
      std::vector<std::int64_t> rows;
      for (std::size_t row = 0; row < outputs.present.size(); ++row) {
        if (outputs.present[row] && reference.present[row])
          rows.push_back(static_cast<std::int64_t>(row));
      }
      record(compare_rows(layout, reference_layout, decl, reference, outputs, rows, result.device),
             result);
    }
    if (decl.role == TensorRole::reduction_output && has_output(outputs, decl) &&
        reference.reductions.count(decl.name)) {
      if (auto equal = equal_on_device(decl, reference, outputs, result.device)) {
        record(named(std::move(*equal), layout, reference_layout), result);
        continue;
      }
      bring_to_host(outputs, decl, result.device);
      record(compare_whole(layout, reference_layout, decl, reference.reductions.at(decl.name),
                           outputs.reductions.at(decl.name)),
             result);
    }
  }
  return result;
}

DeterminismResult check_determinism(const std::vector<TensorDecl>& decls, const std::string& layout,
                                    int repeat, LayoutOutputs& first, LayoutOutputs& again) {
  DeterminismResult result;
  const std::string repeat_name = layout + " repeat " + std::to_string(repeat + 1);
  for (const auto& decl : decls) {
    if (!is_output(decl)) continue;
    const bool row = decl.role == TensorRole::row_output;
    if (auto equal = equal_on_device(decl, first, again, result.device)) {
      result.compared_bytes += bytes_read(*equal);
      continue;
    }
    bring_to_host(first, decl, result.device);
    bring_to_host(again, decl, result.device);
    const Tensor& a = row ? first.rows.at(decl.name) : first.reductions.at(decl.name);
    const Tensor& b = row ? again.rows.at(decl.name) : again.reductions.at(decl.name);
    DriftMetrics metrics = compare_whole(repeat_name, layout, decl, a, b);
    result.compared_bytes += bytes_read(metrics);
    if (metrics.drifted()) result.nondeterminism.push_back(std::move(metrics));
  }
  return result;
}

AccuracyMetrics check_output_accuracy(const std::string& op, const TensorDecl& output,
                                      const AccuracyInputs& inputs) {
  const ReferenceRequest& request = *inputs.request;
  const std::map<std::string, Tensor>& reference = *inputs.reference;
  const Threshold& threshold = inputs.threshold_of(output.name);
  if (!reference.count(output.name)) {
    throw std::logic_error("reference of " + op + " did not produce " + output.name);
  }
  if (output.role == TensorRole::reduction_output) {
    return check_accuracy(output.name, inputs.batch->reductions.at(output.name),
                          request.reduction_rows, reference.at(output.name), request.reduction_rows,
                          threshold.atol, threshold.rtol, {}, inputs.nonfinite_rules);
  }
  auto columns = request.columns.find(output.name);
  return check_accuracy(
      output.name, inputs.row_outputs->rows.at(output.name), request.rows,
      reference.at(output.name), request.rows, threshold.atol, threshold.rtol,
      columns == request.columns.end() ? std::vector<std::int64_t>{} : columns->second,
      inputs.nonfinite_rules);
}

AccuracyResult check_outputs_accuracy(const std::string& op, const std::vector<TensorDecl>& decls,
                                      const AccuracyInputs& inputs) {
  AccuracyResult result;
  for (const auto& decl : decls) {
    if (is_output(decl)) result.tensors.push_back(check_output_accuracy(op, decl, inputs));
  }
  return result;
}

Verdict verdict_of(const InvarianceResult& invariance, const DeterminismResult& determinism,
                   const AccuracyResult& accuracy) {
  if (!determinism.passed()) return Verdict::nondeterministic;
  if (!invariance.passed()) return Verdict::drift;
  if (!accuracy.passed()) return Verdict::inaccurate;
  return Verdict::pass;
}

}  // namespace bitcheck
