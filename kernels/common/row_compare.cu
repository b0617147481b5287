// Bitwise row comparison and output fingerprints on the device (common/row_compare.h). Kernels:
//   row_differs_kernel   one block per row: its threads compare the row's 4-byte words (bytes
//                        when the row is not a whole number of aligned words) and vote; thread 0
//                        writes the row's mask byte. Equality of bits is all that is asked, so
//                        the order of the comparisons is free.
//   fingerprint_kernel   one thread: FNV-1a over the chosen rows in order, the host's chain.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"
#include "common/row_compare.h"
#include "common/runtime.h"
#include "core/counter_hash.h"

namespace bitcheck::cuda {
namespace {

constexpr int threads = 256;

__global__ void row_differs_kernel(const unsigned char* expected, const unsigned char* actual,
                                   std::size_t row_bytes, bool whole_words, std::uint8_t* differs) {
  const std::size_t offset = blockIdx.x * row_bytes;
  int differ = 0;
  if (whole_words) {
    const auto* e = reinterpret_cast<const std::uint32_t*>(expected + offset);
    const auto* a = reinterpret_cast<const std::uint32_t*>(actual + offset);
    for (std::size_t i = threadIdx.x; i < row_bytes / 4 && !differ; i += blockDim.x)
      differ = e[i] != a[i];
  } else {
    for (std::size_t i = threadIdx.x; i < row_bytes && !differ; i += blockDim.x)
      differ = expected[offset + i] != actual[offset + i];
  }
  differ = __syncthreads_or(differ);
  if (threadIdx.x == 0) differs[blockIdx.x] = static_cast<std::uint8_t>(differ);
}

__global__ void fingerprint_kernel(const unsigned char* data, std::size_t row_bytes,
                                   const std::int64_t* rows, std::size_t count, std::uint64_t seed,
                                   std::uint64_t* hash) {
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < count; ++i) {
    h = counter::fnv1a(data + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes,
                       counter::fnv_offset ^ h);
  }
  *hash = h;
}

template <typename T>
__global__ void fill_pattern_kernel(T* data, std::size_t count, T value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = value;
}

template <typename T>
void fill_with(void* data, std::size_t bytes, std::uint32_t pattern) {
  const std::size_t count = bytes / sizeof(T);
  if (count == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::min<std::size_t>((count + threads - 1) / threads, 4096));
  fill_pattern_kernel<T>
      <<<blocks, threads>>>(static_cast<T*>(data), count, static_cast<T>(pattern));
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void fill_pattern_on_device(void* data, std::size_t bytes, std::uint32_t pattern,
                            std::size_t element_bytes) {
  if (element_bytes == 1) return fill_with<std::uint8_t>(data, bytes, pattern);
  if (element_bytes == 2) return fill_with<std::uint16_t>(data, bytes, pattern);
  if (element_bytes == 4) return fill_with<std::uint32_t>(data, bytes, pattern);
  throw std::invalid_argument("fill_pattern_on_device: elements of " +
                              std::to_string(element_bytes) + " bytes");
}

void compare_rows_on_device(const void* expected, const void* actual, std::int64_t rows,
                            std::size_t row_bytes, std::uint8_t* differs, void* stream) {
  if (rows <= 0) return;
  const bool whole_words = row_bytes % 4 == 0 &&
                           reinterpret_cast<std::uintptr_t>(expected) % 4 == 0 &&
                           reinterpret_cast<std::uintptr_t>(actual) % 4 == 0;
  row_differs_kernel<<<static_cast<unsigned>(rows), threads, 0,
                       static_cast<cudaStream_t>(stream)>>>(
      static_cast<const unsigned char*>(expected), static_cast<const unsigned char*>(actual),
      row_bytes, whole_words, differs);
  BITCHECK_CUDA_LAUNCH_CHECK();
}

std::uint64_t fingerprint_rows_on_device(const void* data, std::size_t row_bytes,
                                         const std::vector<std::int64_t>& row_indices,
                                         std::uint64_t seed) {
  DeviceBuffer rows(row_indices.size() * sizeof(std::int64_t));
  rows.upload(row_indices.data(), rows.bytes());
  DeviceBuffer hash(sizeof(std::uint64_t));
  fingerprint_kernel<<<1, 1>>>(static_cast<const unsigned char*>(data), row_bytes,
                               static_cast<const std::int64_t*>(rows.get()), row_indices.size(),
                               seed, static_cast<std::uint64_t*>(hash.get()));
  BITCHECK_CUDA_LAUNCH_CHECK();
  std::uint64_t result = 0;
  hash.download(&result, sizeof result);
  return result;
}

std::vector<std::int64_t> differing_parts_on_device(const void* expected, const void* actual,
                                                    std::size_t bytes, std::size_t part_bytes) {
  if (part_bytes == 0) throw std::invalid_argument("differing_parts_on_device: parts of 0 bytes");
  const auto whole = static_cast<std::int64_t>(bytes / part_bytes);
  const std::size_t tail = bytes % part_bytes;
  const std::int64_t parts = whole + (tail ? 1 : 0);
  std::vector<std::int64_t> differing;
  if (parts == 0) return differing;
  DeviceBuffer mask(static_cast<std::size_t>(parts));
  auto* differs = static_cast<std::uint8_t*>(mask.get());
  compare_rows_on_device(expected, actual, whole, part_bytes, differs, nullptr);
  if (tail) {
    const std::size_t offset = static_cast<std::size_t>(whole) * part_bytes;
    compare_rows_on_device(static_cast<const unsigned char*>(expected) + offset,
                           static_cast<const unsigned char*>(actual) + offset, 1, tail,
                           differs + whole, nullptr);
  }
  std::vector<std::uint8_t> host(static_cast<std::size_t>(parts));
  mask.download(host.data(), host.size());
  for (std::int64_t p = 0; p < parts; ++p) {
    if (host[static_cast<std::size_t>(p)]) differing.push_back(p);
  }
  return differing;
}

std::vector<std::int64_t> differing_rows_on_device(const void* expected, const void* actual,
                                                   std::int64_t rows, std::size_t row_bytes) {
  std::vector<std::int64_t> differing;
  if (rows <= 0) return differing;
  DeviceBuffer mask(static_cast<std::size_t>(rows));
  compare_rows_on_device(expected, actual, rows, row_bytes, static_cast<std::uint8_t*>(mask.get()),
                         nullptr);
  std::vector<std::uint8_t> differs(static_cast<std::size_t>(rows));
  mask.download(differs.data(), differs.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    if (differs[static_cast<std::size_t>(r)]) differing.push_back(r);
  }
  return differing;
}

}  // namespace bitcheck::cuda
