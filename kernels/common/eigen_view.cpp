// Tensor <-> Eigen conversions for the references.
#include "common/eigen_view.h"

#include <algorithm>

#include "core/host_threads.h"

namespace bitcheck {

MatrixF to_matrix(const Tensor& tensor, const std::vector<std::int64_t>& rows) {
  const std::int64_t width = tensor.row_size();
  const std::int64_t count = rows.empty() ? tensor.rows() : static_cast<std::int64_t>(rows.size());
  MatrixF matrix(count, width);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t row = rows.empty() ? i : rows[static_cast<std::size_t>(i)];
    for (std::int64_t c = 0; c < width; ++c) matrix(i, c) = tensor.get(row * width + c);
  }
  return matrix;
}

MatrixF to_matrix_columns(const Tensor& tensor, const std::vector<std::int64_t>& columns) {
  if (columns.empty()) return to_matrix(tensor);
  const std::int64_t width = tensor.row_size();
  MatrixF matrix(tensor.rows(), static_cast<Eigen::Index>(columns.size()));
  for (std::int64_t r = 0; r < tensor.rows(); ++r) {
    for (std::size_t j = 0; j < columns.size(); ++j) {
      matrix(r, static_cast<Eigen::Index>(j)) = tensor.get(r * width + columns[j]);
    }
  }
  return matrix;
}

Tensor from_matrix(const MatrixF& matrix) {
  Tensor tensor(DType::fp32, {matrix.rows(), matrix.cols()});
  for (Eigen::Index r = 0; r < matrix.rows(); ++r) {
    for (Eigen::Index c = 0; c < matrix.cols(); ++c)
      tensor.set(r * matrix.cols() + c, matrix(r, c));
  }
  return tensor;
}

MatrixF product_tn(const MatrixF& a, const MatrixF& b) {
  const Eigen::Index rows = a.cols();
  if (rows < 2 * product_block) return a.transpose() * b;
  MatrixF result(rows, b.cols());
  const auto blocks = static_cast<std::size_t>((rows + product_block - 1) / product_block);
  run_on_threads(blocks, threads_for(blocks), [&](std::size_t block) {
    const Eigen::Index first = static_cast<Eigen::Index>(block) * product_block;
    const Eigen::Index count = std::min(product_block, rows - first);
    result.middleRows(first, count).noalias() = a.middleCols(first, count).transpose() * b;
  });
  return result;
}

}  // namespace bitcheck
