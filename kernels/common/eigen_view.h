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

// aᵀ · b for the wide token reductions (dW, a vocab-sized dtable): with a.cols() of at least
// 2 * product_block, the result's rows in fixed blocks of product_block, each block's product on
// one of up to 8 threads. A block is the same product whatever the thread count, so the bits do
// not depend on it.
inline constexpr Eigen::Index product_block = 8192;
MatrixF product_tn(const MatrixF& a, const MatrixF& b);

}  // namespace bitcheck
