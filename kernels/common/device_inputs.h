// Inputs generated where the impls read them: the counter-based generator (core/counter_hash.h)
// on the device, element (row, column) the same bits as the host's (run/input_generator.h) for
// a uniform tensor, special values included.
// Plain C++ (CUDA build only): `out` is a device pointer, `stream` a cudaStream_t.
#pragma once
#include <cstdint>
#include <vector>

#include "common/device_dtype.h"

namespace bitcheck::cuda {

// What a uniform tensor's elements are a function of: the key, each column's scale (decl.scale
// times its group's), and the special values mixed in at `special_value_rate` (0: none).
struct UniformInputKey {
  DeviceDType dtype = DeviceDType::fp32;
  std::uint64_t seed = 1;
  std::uint64_t name_hash = 0;
  std::vector<float> column_scale;  // one per column: the row width
  double special_value_rate = 0;
};

// Logical rows [first_row, first_row + rows) of the tensor, row-major, into `out`.
void generate_uniform_on_device(const UniformInputKey& key, std::int64_t first_row,
                                std::int64_t rows, void* out, void* stream);

}  // namespace bitcheck::cuda
