// Layout outputs compared where they are made: a per-row equal/differ mask of two device tensors,
// bit for bit, and the output fingerprint of device rows, equal to the host's of the same bytes.
// Plain C++ (CUDA build only): pointers are device pointers, streams cudaStream_t.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bitcheck::cuda {

// differs[r] = 1 where row r of `expected` and row r of `actual` (rows of `row_bytes` each) differ
// in any bit, 0 where every byte is equal; `differs` is a device array of `rows` bytes. A NaN
// payload or the sign of a zero is a difference, as on the host.
void compare_rows_on_device(const void* expected, const void* actual, std::int64_t rows,
                            std::size_t row_bytes, std::uint8_t* differs, void* stream);

// The host's output fingerprint (run/compare.h fingerprint_bytes chained over rows) of the rows
// `row_indices` of a device tensor, continued from `seed`: for each row in order,
// hash = FNV-1a(row, offset ^ hash). One thread walks the bytes, as FNV-1a is a chain; the rows
// are the alone sample, a few megabytes at model scale.
std::uint64_t fingerprint_rows_on_device(const void* data, std::size_t row_bytes,
                                         const std::vector<std::int64_t>& row_indices,
                                         std::uint64_t seed);

// The parts of `part_bytes` (the last one shorter) in which two device buffers of `bytes` each
// differ in any bit, in increasing order: compare_rows_on_device over the whole parts and over
// the tail, the mask brought back.
std::vector<std::int64_t> differing_parts_on_device(const void* expected, const void* actual,
                                                    std::size_t bytes, std::size_t part_bytes);

// Every element of `element_bytes` (1, 2 or 4) of `bytes` of device memory set to the low bytes
// of `pattern` (a dtype's NaN poison).
void fill_pattern_on_device(void* data, std::size_t bytes, std::uint32_t pattern,
                            std::size_t element_bytes);

// The mask of compare_rows_on_device brought back: the indices of the rows that differ, in order.
// Only these rows need to come to the host for the drift metrics.
std::vector<std::int64_t> differing_rows_on_device(const void* expected, const void* actual,
                                                   std::int64_t rows, std::size_t row_bytes);

}  // namespace bitcheck::cuda
