// Pieces shared by the vocabulary ops (embedding, lm_head, logprob, lm_head_logprob): the
// embedding table they all declare, and the FP32 log-softmax reference.
#pragma once
#include <string>

#include "common/eigen_view.h"
#include "core/op.h"

namespace bitcheck {

// The embedding table [V, H] in the case dtype, scaled by 1/sqrt(H). lm_head declares the same
// tensor (same name, shape, scale and generator), which is what tying the weights means here.
TensorDecl embedding_table_decl(const CaseSpec& spec);

// The target id of a logical row, checked against the vocabulary (throws naming the id).
std::int64_t checked_target(const Tensor& targets, std::int64_t row, std::int64_t vocab,
                            const std::string& what);

// FP32 log-softmax reference for one row of logits: log p[target], and optionally
// dlogits = dlogprob * (onehot(target) - softmax) (fp32, not rounded).
float reference_logprob(const Eigen::RowVectorXf& logits, std::int64_t target);
Eigen::RowVectorXf reference_dlogits(const Eigen::RowVectorXf& logits, std::int64_t target,
                                     float dlogprob);

}  // namespace bitcheck
