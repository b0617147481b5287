// CPU building blocks of the vocabulary ops (lm_head, logprob, lm_head_logprob): the LM-head dot
// products with a fixed K order (or the K-split control), and the log-sum-exp over the vocabulary
// in fixed-size chunks merged in chunk order (or the split-by-batch control).
#pragma once
#include <cstdint>
#include <vector>

#include "core/op.h"

namespace bitcheck {

// Vocabulary entries per log-sum-exp chunk: a constant, so the split of a row never depends on
// the batch. Each chunk is reduced in index order, chunks are merged in chunk order.
inline constexpr std::int64_t logsumexp_chunk = 4096;

// Running (max, sum of exp(x - max)) of part of a row.
struct SoftmaxPartial {
  float max = 0.0f;
  float sum = 0.0f;
};
SoftmaxPartial softmax_partial(const float* values, std::int64_t count);
SoftmaxPartial merge_partials(const SoftmaxPartial& a, const SoftmaxPartial& b);

// log(sum_v exp(x_v)) over `count` values: `parts` == 0 means the fixed chunks of logsumexp_chunk
// merged in order; `parts` > 0 is the control's split into that many equal parts merged last to
// first.
float log_sum_exp(const float* values, std::int64_t count, std::int64_t parts = 0);

// An fp32 accumulator tensor (dtable) as a vector and back, bit for bit.
std::vector<float> load_accumulator(const Tensor& accumulator);
void store_accumulator(const std::vector<float>& values, Tensor& accumulator);

// Row `slot` of a [slots, width] tensor as floats.
std::vector<float> row_values(const Tensor& tensor, std::int64_t slot);

// Below this many real rows the K-split controls split a dot product into 4 partials reduced in
// the output dtype, like a library heuristic choosing split-K for small M.
inline constexpr std::int64_t split_below_rows = 4;
inline constexpr std::int64_t split_parts = 4;

// sum_i a[i] * b[i * b_stride], i = 0..length-1 in order, or (split) in split_parts partials each
// rounded to `partial_dtype` and added in order in that dtype.
float lm_head_dot(const float* a, const float* b, std::int64_t b_stride, std::int64_t length,
                  bool split, DType partial_dtype);

// The LM head on one batch: logits[s] = h[s]·tableᵀ (forward) for every real slot; dh[s] =
// dlogits[s]·table, and dtable += dlogitsᵀ·h in token order (backward). `split` selects the
// K-split control.
void lm_head_forward(const Batch& batch, const Tensor& h, const Tensor& table, Tensor& logits,
                     bool split);
void lm_head_input_grad(const Batch& batch, const Tensor& dlogits, const Tensor& table, Tensor& dh,
                        bool split);
void lm_head_table_grad(const Batch& batch, const Tensor& dlogits, const Tensor& h, Tensor& dtable);

// Log-softmax of each real slot's row of `logits` [slots, V] against the batch input "target":
// writes logprob[s] (fp32) and/or dlogits[s] = dlogprob[s] * (onehot - softmax) rounded to the
// dlogits dtype (with the batch input "dlogprob"). `parts` as in log_sum_exp.
void logprob_rows(const Batch& batch, const Tensor& logits, std::int64_t parts, Tensor* logprob,
                  Tensor* dlogits);

}  // namespace bitcheck
