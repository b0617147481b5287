// The counter-based input generator on the host: a tensor's elements from the key alone.
#include "run/input_generator.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "core/host_threads.h"
#include "core/rng.h"
#include "core/special_values.h"

namespace bitcheck {

std::vector<float> column_scales(const TensorDecl& decl, std::int64_t width) {
  std::vector<float> column_scale(static_cast<std::size_t>(width), decl.scale);
  if (const auto groups = static_cast<std::int64_t>(decl.group_scales.size()); groups > 0) {
    const std::int64_t group_width = std::max<std::int64_t>(1, width / groups);
    for (std::int64_t c = 0; c < width; ++c) {
      column_scale[static_cast<std::size_t>(c)] *=
          decl.group_scales[static_cast<std::size_t>(std::min(c / group_width, groups - 1))];
    }
  }
  return column_scale;
}

Tensor generate_input(const TensorDecl& decl, std::vector<std::int64_t> shape, std::uint64_t seed,
                      double special_value_rate, IdDistribution ids) {
  Tensor tensor(decl.dtype, std::move(shape));
  const std::uint64_t name_hash = hash_name(decl.name);
  const std::int64_t rows = tensor.rows(), width = tensor.row_size();
  const auto bound = static_cast<std::uint64_t>(std::max<std::int64_t>(1, decl.index_bound));
  std::optional<TokenIdSampler> token_ids;
  if (decl.generator == Generator::token_id) token_ids.emplace(ids, seed, bound);
  const std::vector<float> column_scale = column_scales(decl, width);
  auto fill_rows = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
      for (std::int64_t c = 0; c < width; ++c) {
        std::int64_t index = r * width + c;
        if (decl.generator == Generator::index) {
          tensor.set_int(index,
                         static_cast<std::int32_t>(counter_index(seed, name_hash, r, c, bound)));
        } else if (token_ids) {
          tensor.set_int(index, static_cast<std::int32_t>(token_ids->id(name_hash, r, c)));
        } else {
          tensor.set(index, counter_uniform(seed, name_hash, r, c) *
                                column_scale[static_cast<std::size_t>(c)]);
          SpecialElement special =
              special_value_at(decl.dtype, seed, name_hash, r, c, special_value_rate);
          if (special.kind != SpecialValue::none) tensor.set_bits(index, special.bits);
        }
      }
    }
  };
  std::int64_t threads =
      std::min<std::int64_t>(static_cast<std::int64_t>(host_threads()),
                             std::max<std::int64_t>(1, rows * width / (1 << 16)));
  if (threads <= 1) {
    fill_rows(0, rows);
    return tensor;
  }
  std::vector<std::thread> workers;
  std::int64_t per_thread = (rows + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    std::int64_t first = t * per_thread, last = std::min(rows, first + per_thread);
    if (first < last) workers.emplace_back(fill_rows, first, last);
  }
  for (auto& worker : workers) worker.join();
  return tensor;
}

}  // namespace bitcheck
