// The kernels of the vocabulary-parallel TP impls (logprob, lm_head and lm_head_logprob with V
// split over rank processes): one rank's share of the row max, of the sums of exponentials and of
// the target logits, the statistics finished into logprob and dlogits, and the copies that cut a
// rank's blocks out of a matrix. Plain C++ header, no CUDA headers.
//
// A rank holds `width` consecutive entries of each row of V, from entry `share_first`, packed as
// [rows, width] in `dtype` (rows are the batch's real rows, packed). Targets are checked against V
// by the caller before any kernel reads them.
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

// row_max[r] = the max of row r in the order of ordered_max (common/vocab_tp_cpu.h): a NaN is
// passed over, -0 is below +0, so the result is a function of the row's values alone.
void vocab_row_max(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                   float* row_max, CUstream_st* stream);

// max[r] = the same max over gathered[k * rows + r], k = 0..ranks-1 (the ranks' maxima).
void vocab_combine_max(const float* gathered, std::int64_t rows, int ranks, float* max,
                       CUstream_st* stream);

// V is cut into `total_chunks` chunks [V * g / total_chunks, V * (g + 1) / total_chunks) (the 8
// fixed chunks, or one share per rank); this rank holds chunks first_chunk .. first_chunk +
// chunks - 1. sums[c * rows + r] = the sum over chunk first_chunk + c of exp(x - max[r]) in fp32,
// in an order fixed by the chunk's length alone: a block's strided sums and fixed tree, or, with
// `in_index_order`, one chain of additions in index order (the naive TP pair's plain sum).
void vocab_chunk_sums(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                      std::int64_t vocab, std::int64_t share_first, int total_chunks,
                      int first_chunk, int chunks, const float* max, bool in_index_order,
                      float* sums, CUstream_st* stream);

// target_logits[r] = x[r, targets[r]] where this rank holds the target, NaN elsewhere.
void vocab_target_logits(DeviceDType dtype, const void* logits, std::int64_t rows,
                         std::int64_t width, std::int64_t share_first, const std::int32_t* targets,
                         float* target_logits, CUstream_st* stream);

// logprob[r] = (gathered_targets[owner * rows + r] - max[r]) - log(sum[r]), owner = targets[r] /
// share: the target logit of the rank that holds it.
void vocab_logprob(const float* gathered_targets, const std::int32_t* targets, std::int64_t rows,
                   std::int64_t share, const float* max, const float* sum, float* logprob,
                   CUstream_st* stream);

// dlogits[r, c] = dlogprob[r] * (onehot - exp((x[r, c] - max[r]) - log(sum[r]))), rounded once
// to `dtype`; onehot where share_first + c is the row's target.
void vocab_dlogits(DeviceDType dtype, const void* logits, std::int64_t rows, std::int64_t width,
                   std::int64_t share_first, const std::int32_t* targets, const float* dlogprob,
                   const float* max, const float* sum, void* dlogits, CUstream_st* stream);

// out[i] = in[i] widened to fp32 (exact).
void widen_to_fp32(DeviceDType dtype, const void* in, float* out, std::int64_t count,
                   CUstream_st* stream);

// dst[r, c] = src[source_rows[r], first_column + c] for c < columns (source_rows nullptr: row r),
// widened to fp32 when `to_fp32`, else its bits copied.
void gather_columns(DeviceDType dtype, bool to_fp32, const void* src, std::int64_t src_width,
                    const std::int32_t* source_rows, std::int64_t rows, std::int64_t first_column,
                    std::int64_t columns, void* dst, CUstream_st* stream);

// dst[c, i] = src[first_row + i, c] ([width, count]) for rows first_row .. first_row + count - 1
// of src [*, width], widened to fp32 when `to_fp32`, else its bits copied.
void transpose_rows(DeviceDType dtype, bool to_fp32, const void* src, std::int64_t width,
                    std::int64_t first_row, std::int64_t count, void* dst, CUstream_st* stream);

}  // namespace bitcheck::cuda
