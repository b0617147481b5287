// The counter-based input generator: a tensor of a declaration filled from (seed, tensor name,
// logical row, column) alone, so a logical row holds the same values in every layout; the device
// generator (kernels/common/device_inputs.h) gives the same bits.
#pragma once
#include <cstdint>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace bitcheck {

// Each column's scale: decl.scale, times its group's scale where the decl has groups.
std::vector<float> column_scales(const TensorDecl& decl, std::int64_t width);

// Element (row, column) depends only on the key, never on the layout. Rows are split over threads;
// the values do not depend on the split. With a special-value rate, that fraction of a float
// tensor's elements is NaN, +-Inf, subnormal or -0 instead; token ids follow `ids`.
Tensor generate_input(const TensorDecl& decl, std::vector<std::int64_t> shape, std::uint64_t seed,
                      double special_value_rate = 0, IdDistribution ids = IdDistribution::uniform);

}  // namespace bitcheck
