// embedding kernels: the row gather (forward), the fixed-order segment-sum scatter of dtable
// (backward), and the atomicAdd scatter (the control). Plain C++ header, no CUDA headers.
//
// Rows are addressed through `slots`: entry r of `slots` is the slot (row of ids / out / dout) of
// the r-th real token, so pad slots are never read or written. Ids outside [0, vocab) are never
// dereferenced: the kernel records (slot << 32 | id) of one such token in `error_record` (the
// caller sets it to embedding_no_error first and checks it after the launch).
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

inline constexpr std::uint64_t embedding_no_error = ~std::uint64_t(0);

// out[slots[r]] = table[ids[slots[r]]], r = 0..rows-1, copied bit for bit.
void embedding_gather(DeviceDType dtype, const std::int32_t* ids, const std::int32_t* slots,
                      std::int64_t rows, const void* table, std::int64_t vocab, std::int64_t hidden,
                      void* out, std::uint64_t* error_record, CUstream_st* stream);

// Fixed-order dtable accumulation: the tokens are given sorted by (id, token order) as segments,
// segment g covering sorted positions [segment_starts[g], segment_starts[g+1]) with id
// segment_ids[g]; sorted_slots[i] is the dout slot of sorted position i. For each element:
// acc = dtable[id][c]; acc += dout[slot][c] for the segment's tokens in order; dtable[id][c] = acc.
void embedding_backward_segments(DeviceDType dtype, const void* dout, std::int64_t hidden,
                                 const std::int32_t* sorted_slots,
                                 const std::int32_t* segment_starts,
                                 const std::int32_t* segment_ids, std::int64_t segments,
                                 float* dtable, CUstream_st* stream);

// The control: every (token, column) does atomicAdd(&dtable[id][c], dout[slot][c]); the order of
// the additions into one element is whatever order the hardware serves the atomics in.
void embedding_backward_atomic(DeviceDType dtype, const void* dout, std::int64_t hidden,
                               const std::int32_t* ids, const std::int32_t* slots,
                               std::int64_t rows, std::int64_t vocab, float* dtable,
                               std::uint64_t* error_record, CUstream_st* stream);

}  // namespace bitcheck::cuda
