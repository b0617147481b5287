// CPU building blocks of the vocabulary ops: fixed-order LM-head products and chunked log-sum-exp.
#include "common/vocab_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/token_reduction.h"

namespace bitcheck {

SoftmaxPartial softmax_partial(const float* values, std::int64_t count) {
  SoftmaxPartial partial;
  partial.max = values[0];
  for (std::int64_t i = 1; i < count; ++i) partial.max = std::max(partial.max, values[i]);
  for (std::int64_t i = 0; i < count; ++i) partial.sum += std::exp(values[i] - partial.max);
  return partial;
}

SoftmaxPartial merge_partials(const SoftmaxPartial& a, const SoftmaxPartial& b) {
  SoftmaxPartial merged;
  merged.max = std::max(a.max, b.max);
  merged.sum = a.sum * std::exp(a.max - merged.max) + b.sum * std::exp(b.max - merged.max);
  return merged;
}

float log_sum_exp(const float* values, std::int64_t count, std::int64_t parts) {
  std::vector<SoftmaxPartial> partials;
  const std::int64_t piece = parts > 0 ? (count + parts - 1) / parts : logsumexp_chunk;
  for (std::int64_t first = 0; first < count; first += piece) {
    partials.push_back(softmax_partial(values + first, std::min(piece, count - first)));
  }
  if (parts > 0)
    std::reverse(partials.begin(), partials.end());  // the control merges last to first
  SoftmaxPartial total = partials[0];
  for (std::size_t i = 1; i < partials.size(); ++i) total = merge_partials(total, partials[i]);
  return total.max + std::log(total.sum);
}

std::vector<float> load_accumulator(const Tensor& accumulator) {
  if (accumulator.dtype() != DType::fp32) throw std::logic_error("reduction accumulators are fp32");
  std::vector<float> values(static_cast<std::size_t>(accumulator.numel()));
  std::memcpy(values.data(), accumulator.data(), accumulator.bytes());
  return values;
}

void store_accumulator(const std::vector<float>& values, Tensor& accumulator) {
  if (accumulator.dtype() != DType::fp32 ||
      values.size() != static_cast<std::size_t>(accumulator.numel())) {
    throw std::logic_error("reduction accumulators are fp32 of the declared size");
  }
  std::memcpy(accumulator.data(), values.data(), accumulator.bytes());
}

std::vector<float> row_values(const Tensor& tensor, std::int64_t slot) {
  const std::int64_t width = tensor.row_size();
  std::vector<float> values(static_cast<std::size_t>(width));
  for (std::int64_t i = 0; i < width; ++i)
    values[static_cast<std::size_t>(i)] = tensor.get(slot * width + i);
  return values;
}

namespace {
float dot_range(const float* a, const float* b, std::int64_t b_stride, std::int64_t first,
                std::int64_t last) {
  float sum = 0.0f;
  for (std::int64_t i = first; i < last; ++i) sum += a[i] * b[i * b_stride];
  return sum;
}
}  // namespace

float lm_head_dot(const float* a, const float* b, std::int64_t b_stride, std::int64_t length,
                  bool split, DType partial_dtype) {
  if (!split) return dot_range(a, b, b_stride, 0, length);
  float total = 0.0f;
  const std::int64_t part = (length + split_parts - 1) / split_parts;
  for (std::int64_t first = 0; first < length; first += part) {
    float partial = dot_range(a, b, b_stride, first, std::min(length, first + part));
    total = round_to(partial_dtype, total + round_to(partial_dtype, partial));
  }
  return total;
}

void lm_head_forward(const Batch& batch, const Tensor& h, const Tensor& table, Tensor& logits,
                     bool split) {
  const std::int64_t vocab = table.shape()[0], hidden = table.shape()[1];
  const std::vector<float> weights = table.to_floats();
  for (std::int64_t s : real_slots(batch)) {
    const std::vector<float> x = row_values(h, s);
    for (std::int64_t v = 0; v < vocab; ++v) {
      logits.set(s * vocab + v, lm_head_dot(x.data(), weights.data() + v * hidden, 1, hidden, split,
                                            logits.dtype()));
    }
  }
}

void lm_head_input_grad(const Batch& batch, const Tensor& dlogits, const Tensor& table, Tensor& dh,
                        bool split) {
  const std::int64_t vocab = table.shape()[0], hidden = table.shape()[1];
  const std::vector<float> weights = table.to_floats();
  for (std::int64_t s : real_slots(batch)) {
    const std::vector<float> g = row_values(dlogits, s);
    for (std::int64_t c = 0; c < hidden; ++c) {
      dh.set(s * hidden + c,
             lm_head_dot(g.data(), weights.data() + c, hidden, vocab, split, dh.dtype()));
    }
  }
}

void lm_head_table_grad(const Batch& batch, const Tensor& dlogits, const Tensor& h,
                        Tensor& dtable) {
  const std::int64_t vocab = dtable.shape()[0], hidden = dtable.shape()[1];
  std::vector<float> accumulator = load_accumulator(dtable);  // carried across micro-batches
  for (std::int64_t s : real_slots(batch)) {  // token order: one add per token into each element
    const std::vector<float> g = row_values(dlogits, s), x = row_values(h, s);
    for (std::int64_t v = 0; v < vocab; ++v) {
      float* row = accumulator.data() + v * hidden;
      for (std::int64_t c = 0; c < hidden; ++c)
        row[c] += g[static_cast<std::size_t>(v)] * x[static_cast<std::size_t>(c)];
    }
  }
  store_accumulator(accumulator, dtable);
}

}  // namespace bitcheck
