// Eigen views of host tensors for the FP32 references: decode a tensor (any dtype) into a
// row-major float matrix, and write one back.
#pragma once
#include <Eigen/Dense>
#include <vector>

#include "core/tensor.h"

namespace bitcheck {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows `rows` of `tensor` (all rows when empty) as a [rows, row_size] float matrix.
MatrixF to_matrix(const Tensor& tensor, const std::vector<std::int64_t>& rows = {});
// All rows of `tensor`, only `columns` of each (all columns when empty).
MatrixF to_matrix_columns(const Tensor& tensor, const std::vector<std::int64_t>& columns);
Tensor from_matrix(const MatrixF& matrix);  // fp32 tensor [rows, cols]

}  // namespace bitcheck
