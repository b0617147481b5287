// The GEMM rig shared by the cuBLASLt search and its refinement (gemm_rig.h).
#include <algorithm>

#include "common/bench_support.h"
#include "matmul/gemm_rig.h"
#include "matmul/gemm_rig_kernels.h"

namespace bitcheck::cuda {

GemmDType gemm_dtype_named(const std::string& name) {
  return name == "bf16" ? GemmDType::bf16 : name == "fp16" ? GemmDType::fp16 : GemmDType::fp32;
}

GemmRig::GemmRig(const std::string& dtype, const std::string& form, std::int64_t n, std::int64_t k,
                 std::uint64_t seed, std::int64_t max_rows)
    : dtype_(gemm_dtype_named(dtype)),
      host_dtype_(*parse_dtype(dtype)),
      form_(form == "input_grad" ? LtGemmForm::input_grad : LtGemmForm::forward),
      n_(n),
      k_(k),
      in_cols_(form_ == LtGemmForm::forward ? k : n),
      out_cols_(form_ == LtGemmForm::forward ? n : k),
      max_rows_(max_rows),
      element_(dtype_size(host_dtype_)) {
  const std::size_t w_bytes = static_cast<std::size_t>(n * k) * element_;
  for (int i = 0; i < 2; ++i) {
    x_.emplace_back(static_cast<std::size_t>(max_rows_ * in_cols_) * element_);
    algo_fill_random(dtype_, x_.back().get(), static_cast<std::size_t>(max_rows_ * in_cols_),
                     2 * seed + 1 + 1000 * static_cast<std::uint64_t>(i));
    y_.emplace_back(static_cast<std::size_t>(max_rows_ * out_cols_) * element_);
  }
  // W copies to rotate through at small M (where W is the working set), as the benchmark does.
  BenchSettings rotation;
  const std::size_t w_sets =
      std::min<std::size_t>(cuda_bench::rotation_sets(w_bytes, rotation), 16);
  for (std::size_t i = 0; i < w_sets; ++i) {
    w_.emplace_back(w_bytes);
    algo_fill_random(dtype_, w_.back().get(), static_cast<std::size_t>(n * k),
                     2 * seed + 2 + 1000 * static_cast<std::uint64_t>(i));
  }
  workspace_ = DeviceBuffer(kAlgoWorkspaceBytes);
  fingerprints_ = DeviceBuffer(static_cast<std::size_t>(max_rows_) * sizeof(std::uint64_t));
  synchronize();
}

void GemmRig::launch(const LtConfig& config, std::int64_t rows, std::size_t w_index,
                     std::size_t xy_index) {
  if (form_ == LtGemmForm::forward) {
    lt_gemm(config, dtype_, x_[xy_index].get(), w_[w_index].get(), y_[xy_index].get(), rows, n_, k_,
            workspace_.get(), kAlgoWorkspaceBytes, nullptr);
  } else {
    lt_gemm_nn(config, dtype_, x_[xy_index].get(), w_[w_index].get(), y_[xy_index].get(), rows, n_,
               k_, workspace_.get(), kAlgoWorkspaceBytes, nullptr);
  }
}

double GemmRig::median_us(const LtConfig& config, std::int64_t rows, int warmup, int repeats) {
  BenchSettings settings;
  settings.warmup = warmup;
  settings.repeats = repeats;
  const std::size_t set_bytes =
      static_cast<std::size_t>(rows * in_cols_ + n_ * k_ + rows * out_cols_) * element_;
  const std::size_t sets = std::min(w_.size(), cuda_bench::rotation_sets(set_bytes, settings));
  const BenchMeasurement measured = cuda_bench::time_rotated(
      settings, sets, [&](std::size_t i) { launch(config, rows, i % sets, i % 2); });
  return 1000.0 * measured.median_ms;
}

std::vector<std::uint64_t> GemmRig::row_fingerprints(const LtConfig& config, std::int64_t rows) {
  launch(config, rows, 0, 0);
  algo_row_fingerprints(y_[0].get(), rows, static_cast<std::int64_t>(row_bytes()),
                        fingerprints_.as<std::uint64_t>());
  std::vector<std::uint64_t> result(static_cast<std::size_t>(rows));
  fingerprints_.download(result.data(), result.size() * sizeof(std::uint64_t));
  return result;
}

GemmRig::ReferenceRows GemmRig::set_accuracy_rows(const std::vector<std::int64_t>& rows) {
  const auto count = static_cast<std::int64_t>(rows.size());
  accuracy_rows_ = DeviceBuffer(rows.size() * sizeof(std::int64_t));
  accuracy_rows_.upload(rows.data(), accuracy_rows_.bytes());
  gathered_rows_ = DeviceBuffer(std::max<std::size_t>(1, rows.size()) * row_bytes());
  const std::size_t outputs = static_cast<std::size_t>(count * out_cols_);
  DeviceBuffer value(outputs * sizeof(double)), abs_sum(outputs * sizeof(double));
  algo_reference_rows(dtype_, form_, x(), w(), accuracy_rows_.as<std::int64_t>(), count, n_, k_,
                      value.as<double>(), abs_sum.as<double>());
  ReferenceRows reference{std::vector<double>(outputs), std::vector<double>(outputs)};
  value.download(reference.value.data(), value.bytes());
  abs_sum.download(reference.abs_sum.data(), abs_sum.bytes());
  return reference;
}

std::vector<unsigned char> GemmRig::accuracy_row_bytes(std::int64_t count) {
  algo_gather_rows(y(), accuracy_rows_.as<std::int64_t>(), count,
                   static_cast<std::int64_t>(row_bytes()), gathered_rows_.get());
  std::vector<unsigned char> bytes(static_cast<std::size_t>(count) * row_bytes());
  if (count > 0) gathered_rows_.download(bytes.data(), bytes.size());
  return bytes;
}

bool GemmRig::accepts(const LtConfig& config, std::int64_t rows) const {
  std::size_t workspace = 0;
  return lt_config_supports(config, form_, dtype_, rows, n_, k_, &workspace) &&
         workspace <= kAlgoWorkspaceBytes;
}

LtConfig GemmRig::heuristic(std::int64_t rows) const {
  return form_ == LtGemmForm::forward ? lt_heuristic_config(dtype_, rows, n_, k_)
                                      : lt_heuristic_config_nn(dtype_, rows, n_, k_);
}

}  // namespace bitcheck::cuda
