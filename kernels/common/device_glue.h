// Moving and converting row tensors on the device with the host's bits: column copies (slices and
// concatenations of rows) and element conversions between fp32 and the 16-bit dtypes, as
// core/dtype.h converts (a NaN keeps its sign and top payload bits, where CUDA's own intrinsics
// give one canonical NaN). A composed impl (the chain) moves its values between calls with these.
// Plain C++ (CUDA build only): pointers are device pointers.
#pragma once
#include <cstddef>

#include "common/device_dtype.h"

namespace bitcheck::cuda {

// For r < rows: `width` bytes from source + r * source_pitch to destination + r * pitch, on the
// default stream.
void copy_columns_on_device(void* destination, std::size_t pitch, const void* source,
                            std::size_t source_pitch, std::size_t width, std::size_t rows);

// `count` elements of `from` at `in` converted to `to` at `out` (fp32 <-> bf16 / fp16, or a copy
// when from == to), on the default stream.
void convert_on_device(const void* in, DeviceDType from, void* out, DeviceDType to,
                       std::size_t count);

}  // namespace bitcheck::cuda
