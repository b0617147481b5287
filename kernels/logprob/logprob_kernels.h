// logprob kernels: log-softmax over the vocabulary plus the target gather (forward), and
// dlogits = dlogprob * (onehot - softmax) (backward). Plain C++ header, no CUDA headers.
//
// Rows are addressed through index lists: input row r of the call is slot in_rows[r] of logits /
// target / dlogprob, and its outputs go to row out_rows[r], so pad slots are never read. Targets
// outside [0, vocab) are never dereferenced: one of them is recorded as (slot << 32 | id) in
// `error_record` (the caller sets it to logprob_no_error first and checks it after the launch).
#pragma once
#include <cstdint>

#include "device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

inline constexpr std::uint64_t logprob_no_error = ~std::uint64_t(0);
// The fixed split of a row: chunks of this many vocabulary entries, whatever the batch.
inline constexpr std::int64_t logprob_chunk = 4096;

struct LogprobSplit {
  std::int64_t piece = logprob_chunk;  // vocabulary entries per block (a multiple of 8)
  bool reverse_merge = false;          // merge the pieces last to first (the control)
};

// The control's split: more, larger-or-smaller pieces when rows are few (enough blocks to fill
// `sm_count` SMs twice), merged last to first. Depends on the batch by design.
LogprobSplit logprob_split_by_rows(std::int64_t rows, std::int64_t vocab, int sm_count);

// Bytes of fp32 workspace the kernels need for `rows` rows: (max, sum) per (row, piece) plus
// the log-sum-exp per row.
std::size_t logprob_workspace_bytes(std::int64_t rows, std::int64_t vocab,
                                    const LogprobSplit& split);

// logprob[out_rows[r]] = logits[in_rows[r], target] - logsumexp(logits[in_rows[r], :]), fp32.
void logprob_forward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                     const std::int32_t* in_rows, const std::int32_t* out_rows, std::int64_t rows,
                     std::int64_t vocab, float* logprob, const LogprobSplit& split, void* workspace,
                     std::uint64_t* error_record, CUstream_st* stream);

// dlogits[out_rows[r], v] = dlogprob[in_rows[r]] * ((v == target) - softmax(logits[in_rows[r]])_v),
// rounded once to `dtype`.
void logprob_backward(DeviceDType dtype, const void* logits, const std::int32_t* targets,
                      const float* dlogprob, const std::int32_t* in_rows,
                      const std::int32_t* out_rows, std::int64_t rows, std::int64_t vocab,
                      void* dlogits, const LogprobSplit& split, void* workspace,
                      std::uint64_t* error_record, CUstream_st* stream);

}  // namespace bitcheck::cuda
