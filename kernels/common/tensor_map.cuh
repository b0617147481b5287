// TMA tensor maps for the sm_90 kernels (host side): the driver's cuTensorMapEncodeTiled, reached
// through the runtime's entry-point query so no kernel library links libcuda, and the one map shape
// bitcheck's kernels load and store: a row-major 16-bit matrix in boxes 64 elements (128 bytes)
// wide, 128B-swizzled, zero-filled past its end. Included only by .cu files.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"

namespace bitcheck::cuda {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult query{};
    BITCHECK_CUDA_CALL(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                                        cudaEnableDefault, &query));
    if (query != cudaDriverEntryPointSuccess || function == nullptr)
      throw std::runtime_error("cuTensorMapEncodeTiled not available");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// Row-major [rows, cols] 16-bit matrix whose rows lie `row_stride` elements apart (0: cols; a
// multiple of 8, for TMA's 16-byte strides), box of box_rows x 64 columns, 128B swizzle, zero fill
// past column cols and row rows (so a matrix of columns inside a wider one reads zeros past its own
// last column, not its neighbour's).
inline CUtensorMap make_tensor_map(CUtensorMapDataType type, const void* base, std::int64_t rows,
                                   std::int64_t cols, int box_rows, std::int64_t row_stride = 0) {
  constexpr int box_cols = 64;  // 64 16-bit elements: one 128-byte swizzle row
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride > 0 ? row_stride : cols) * 2};
  const cuuint32_t box[2] = {box_cols, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed with CUresult " +
                             std::to_string(static_cast<int>(result)));
  return map;
}

}  // namespace bitcheck::cuda
