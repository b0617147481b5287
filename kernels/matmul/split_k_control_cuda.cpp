// The split-K GEMM of the CUDA split-K-by-rows controls: partial fixed-order GEMMs over slices of
// the reduction, summed on the host in the output dtype.
#include <algorithm>

#include "common/adapter_support.h"
#include "matmul/fixed_order_gemm.h"
#include "matmul/split_k_control.h"

namespace bitcheck::cuda {

void split_k_gemm(const Tensor& x, const DeviceBuffer& w, std::int64_t columns, int parts,
                  Tensor& y) {
  const std::int64_t rows = x.rows(), reduction = x.row_size();
  const GemmDType dtype = cuda_support::device_dtype(x.dtype());
  if (parts <= 1) {
    DeviceBuffer x_device = cuda_support::upload(x), y_device(std::max<std::size_t>(y.bytes(), 16));
    fixed_order_gemm(dtype, x_device.get(), w.get(), y_device.get(), rows, columns, reduction,
                     nullptr);
    cuda_support::download(y_device, y);
    return;
  }
  const std::int64_t slice = (reduction + parts - 1) / parts;
  Tensor partial(y.dtype(), y.shape());
  for (std::int64_t i = 0; i < y.numel(); ++i) y.set(i, 0.0f);
  for (std::int64_t first = 0; first < reduction; first += slice) {
    const std::int64_t last = std::min(reduction, first + slice);
    Tensor masked = x;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < reduction; ++c) {
        if (c < first || c >= last) masked.set(r * reduction + c, 0.0f);
      }
    }
    DeviceBuffer x_device = cuda_support::upload(masked);
    DeviceBuffer y_device(std::max<std::size_t>(partial.bytes(), 16));
    fixed_order_gemm(dtype, x_device.get(), w.get(), y_device.get(), rows, columns, reduction,
                     nullptr);
    cuda_support::download(y_device, partial);
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      y.set(i, y.get(i) + partial.get(i));  // set rounds to the dtype
    }
  }
}

}  // namespace bitcheck::cuda
