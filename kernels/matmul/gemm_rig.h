// The GEMM rig of `bitcheck algos` and `algos --refine` (apps/tuner/): the device buffers of one
// shape up to a largest M (random inputs, row r of X the same whatever M is; outputs; a workspace),
// per-row output fingerprints, accuracy rows against an fp64 reference, and the benchmark timing
// method of every CUDA impl (bench_support.h). Plain C++: no CUDA headers (gemm_rig_cuda.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/runtime.h"
#include "core/dtype.h"
#include "matmul/cublaslt_gemm.h"

namespace bitcheck::cuda {

// The same workspace as matmul/cublaslt-pinned: a configuration needing more is never pinned.
constexpr std::size_t kAlgoWorkspaceBytes = std::size_t(32) << 20;

GemmDType gemm_dtype_named(const std::string& name);  // bf16 | fp16 | fp32

class GemmRig {
 public:
  GemmRig(const std::string& dtype, const std::string& form, std::int64_t n, std::int64_t k,
          std::uint64_t seed, std::int64_t max_rows);

  // Y = the GEMM of `rows` rows with exactly `config`, on W copy w_index and X/Y copy xy_index
  // (copy 0 is the checked one).
  void launch(const LtConfig& config, std::int64_t rows, std::size_t w_index = 0,
              std::size_t xy_index = 0);
  // Median launch time in microseconds: rotated W copies where W is the working set, warm-up.
  double median_us(const LtConfig& config, std::int64_t rows, int warmup, int repeats);
  // One run on copy 0, then one fingerprint per output row (rows values).
  std::vector<std::uint64_t> row_fingerprints(const LtConfig& config, std::int64_t rows);
  // Sets the output rows an accuracy check reads (sorted, each below max_rows) and returns their
  // fp64 reference on copy 0's inputs: the value and the sum of |a*b| of every output, row-major
  // [rows, out_cols].
  struct ReferenceRows {
    std::vector<double> value, abs_sum;
  };
  ReferenceRows set_accuracy_rows(const std::vector<std::int64_t>& rows);
  // The bytes of the first `count` accuracy rows of copy 0's output as the last launch left them,
  // row-major [count, row_bytes()].
  std::vector<unsigned char> accuracy_row_bytes(std::int64_t count);
  // Whether cuBLASLt accepts `config` at `rows` within the workspace.
  bool accepts(const LtConfig& config, std::int64_t rows) const;
  LtConfig heuristic(std::int64_t rows) const;  // the library default at M = rows

  GemmDType dtype() const { return dtype_; }
  DType host_dtype() const { return host_dtype_; }
  LtGemmForm form() const { return form_; }
  std::int64_t n() const { return n_; }
  std::int64_t k() const { return k_; }
  std::int64_t in_cols() const { return in_cols_; }
  std::int64_t out_cols() const { return out_cols_; }
  std::int64_t max_rows() const { return max_rows_; }
  std::size_t element() const { return element_; }
  std::size_t row_bytes() const { return static_cast<std::size_t>(out_cols_) * element_; }
  const void* x(std::size_t i = 0) const { return x_[i].get(); }
  const void* w(std::size_t i = 0) const { return w_[i].get(); }
  const void* y(std::size_t i = 0) const { return y_[i].get(); }

 private:
  GemmDType dtype_;
  DType host_dtype_;
  LtGemmForm form_;
  std::int64_t n_, k_, in_cols_, out_cols_, max_rows_;
  std::size_t element_;
  std::vector<DeviceBuffer> x_, y_, w_;
  DeviceBuffer workspace_, fingerprints_;
  DeviceBuffer accuracy_rows_, gathered_rows_;  // the accuracy rows' indices, their gathered bytes
};

}  // namespace bitcheck::cuda
