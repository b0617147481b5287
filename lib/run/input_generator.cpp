// The counter-based input generator on the host: a tensor's elements from the key alone.
#include "run/input_generator.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "core/counter_hash.h"
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

namespace {

// Rows [first, last) of a uniform floating tensor: the key's row part hashed once a row, each
// element one more finalizer (counter::key_hash split as row_hash and column_hash, so the bits are
// counter_uniform's and special_value_at's), the dtype's encoding chosen once, not per element.
void fill_uniform_rows(Tensor& tensor, std::uint64_t seed, std::uint64_t name_hash,
                       const std::vector<float>& column_scale, double special_value_rate,
                       std::int64_t first, std::int64_t last) {
  const DType dtype = tensor.dtype();
  const std::int64_t width = tensor.row_size();
  const auto w = static_cast<std::size_t>(width);
  const counter::FloatFormat format = float_format_of(dtype);
  std::uint16_t (*const encode_half)(float) =
      dtype == DType::bf16 ? float_to_bf16_bits : float_to_fp16_bits;
  auto* bytes = static_cast<unsigned char*>(tensor.data());
  std::vector<float> values(w);
  for (std::int64_t r = first; r < last; ++r) {
    const std::uint64_t row = counter::row_hash(seed, name_hash, r);
    for (std::size_t c = 0; c < w; ++c) {
      values[c] = counter::uniform_of(counter::column_hash(row, static_cast<std::int64_t>(c))) *
                  column_scale[c];
    }
    unsigned char* out = bytes + static_cast<std::size_t>(r) * w * dtype_size(dtype);
    if (dtype == DType::fp32) {
      std::memcpy(out, values.data(), w * sizeof(float));
    } else {
      for (std::size_t c = 0; c < w; ++c) {
        const std::uint16_t half = encode_half(values[c]);
        std::memcpy(out + 2 * c, &half, 2);
      }
    }
    if (special_value_rate <= 0.0) continue;
    const std::uint64_t selection =
        counter::row_hash(seed, name_hash ^ counter::special_selection_salt, r);
    const bool nonfinite = counter::row_allows_nonfinite(seed, r);
    for (std::size_t c = 0; c < w; ++c) {
      const counter::SpecialDraw special =
          counter::special_of(format, counter::column_hash(selection, static_cast<std::int64_t>(c)),
                              special_value_rate, nonfinite);
      if (special.kind != counter::SpecialKind::none)
        tensor.set_bits(r * width + static_cast<std::int64_t>(c), special.bits);
    }
  }
}

}  // namespace

Tensor generate_input(const TensorDecl& decl, std::vector<std::int64_t> shape, std::uint64_t seed,
                      double special_value_rate, IdDistribution ids) {
  Tensor tensor(decl.dtype, std::move(shape),
                Tensor::uninitialized);  // every element written below
  const std::uint64_t name_hash = hash_name(decl.name);
  const std::int64_t rows = tensor.rows(), width = tensor.row_size();
  const auto bound = static_cast<std::uint64_t>(std::max<std::int64_t>(1, decl.index_bound));
  std::optional<TokenIdSampler> token_ids;
  if (decl.generator == Generator::token_id) token_ids.emplace(ids, seed, bound);
  const std::vector<float> column_scale = column_scales(decl, width);
  const bool uniform = decl.generator != Generator::index && !token_ids && decl.dtype != DType::i32;
  auto fill_rows = [&](std::int64_t first, std::int64_t last) {
    if (uniform) {
      fill_uniform_rows(tensor, seed, name_hash, column_scale, special_value_rate, first, last);
      return;
    }
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
