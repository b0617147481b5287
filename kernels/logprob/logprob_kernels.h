// logprob kernels: log-softmax over the vocabulary plus the target gather (forward), and
// dlogits = dlogprob * (onehot - softmax) (backward). Plain C++ header, no CUDA headers.
//
// Rows are addressed through index lists: input row r of the call is slot in_rows[r] of logits /
// target / dlogprob, and its outputs go to row out_rows[r], so pad slots are never read. Targets
// outside [0, vocab) are never dereferenced: one of them is recorded as (slot << 32 | id) in
// `error_record` (the caller sets it to logprob_no_error first and checks it after the launch).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/device_dtype.h"
#include "core/paths.h"

struct CUstream_st;

namespace bitcheck::cuda {

inline constexpr std::uint64_t logprob_no_error = ~std::uint64_t(0);

// How a row's vocabulary reduction is split. The default is the fixed-order path, whose split is
// logprob_fixed_plan's (V, dtype and pass only). A positive `piece` selects the control's path:
// pieces of that many entries, each reduced into a workspace partial, merged per row by one thread.
struct LogprobSplit {
  std::int64_t piece = 0;      // 0: the fixed-order path; > 0: entries per piece (a multiple of 8)
  bool reverse_merge = false;  // the control's pieces are merged last to first
  // The fixed-order forward: the register-loading kernel even where the streamed one runs (as
  // BITCHECK_LOGPROB_FORWARD=registers does), so a sweep reaches that path on sm_90.
  bool registers_forward = false;
};

// The launch paths the calls record (core/paths.h): the fixed-order forward's
// "forward.streamed" (sm_90) and "forward.registers" (other GPUs, unaligned rows, or forced), its
// backward's "backward.one-block", "backward.cluster" (a row over a thread-block cluster) and
// "backward.unstaged" (rows too long to stage), and the control's "pieces".
std::vector<PathDecl> logprob_paths(bool control);

// The fixed-order path's split of one row: `blocks` blocks per row (one thread-block cluster when
// more than one), block b reducing entries [b * block_entries, (b + 1) * block_entries). `staged`:
// the backward keeps those entries in shared memory between the log-sum-exp and the dlogits pass,
// so it reads the logits once; otherwise it reads them twice. A function of V, the dtype, the pass
// and whether the device and this build support clusters; never of the rows.
struct LogprobFixedPlan {
  std::int64_t blocks = 1;
  std::int64_t block_entries = 0;
  bool staged = false;
};
LogprobFixedPlan logprob_fixed_plan(DeviceDType dtype, std::int64_t vocab, bool backward);

// The control's split: more, smaller pieces when rows are few (enough blocks to fill `sm_count`
// SMs twice), merged last to first. Depends on the batch by design.
LogprobSplit logprob_split_by_rows(std::int64_t rows, std::int64_t vocab, int sm_count);

// Bytes of workspace the kernels need for `rows` rows: none for the fixed-order path; for the
// control, fp32 (max, sum) per (row, piece) plus the log-sum-exp per row.
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
