// The benchmark method every CUDA impl's Impl::benchmark uses, in one place so all ratios in a
// bench table are measured alike: enough rotated input sets that the caches do not hold the working
// set, warm-up, then the median (and minimum) of CUDA-event-timed launches.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/op.h"
#include "runtime.h"

namespace bitcheck::cuda_bench {

// Copies of a `set_bytes` working set to rotate through so together they exceed
// settings.rotate_bytes (at most 64, and at most half the free device memory).
inline std::size_t rotation_sets(std::size_t set_bytes, const BenchSettings& settings) {
  set_bytes = std::max<std::size_t>(set_bytes, 1);
  std::size_t sets =
      std::clamp<std::size_t>((settings.rotate_bytes + set_bytes - 1) / set_bytes + 1, 1, 64);
  return std::min<std::size_t>(
      sets, std::max<std::size_t>(1, cuda::free_device_memory() / 2 / set_bytes));
}

// A benchmark input of `bytes` in `dtype`: pseudo-random, uniform in [-1, 1), never zero (seeded,
// so every impl of a point sees the same data). Constant inputs understate the power a GEMM or an
// attention kernel draws and so overstate its speed, and differently for different kernels.
inline cuda::DeviceBuffer random_input(std::size_t bytes, DType dtype, std::uint64_t seed) {
  cuda::DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
  buffer.fill_uniform(dtype == DType::bf16   ? cuda::DeviceDType::bf16
                      : dtype == DType::fp16 ? cuda::DeviceDType::fp16
                                             : cuda::DeviceDType::fp32,
                      seed);
  return buffer;
}

// Warm-up, then the median and minimum of settings.repeats timed launches; launch(i) uses input
// set i (cycling through `sets`).
template <typename Launch>
BenchMeasurement time_rotated(const BenchSettings& settings, std::size_t sets, Launch&& launch) {
  for (int i = 0; i < settings.warmup; ++i) launch(static_cast<std::size_t>(i) % sets);
  cuda::synchronize();
  cuda::EventTimer timer;
  std::vector<double> times;
  for (int i = 0; i < settings.repeats; ++i) {
    timer.start();
    launch(static_cast<std::size_t>(i) % sets);
    times.push_back(timer.stop_ms());
  }
  std::sort(times.begin(), times.end());
  BenchMeasurement measurement;
  measurement.median_ms = times[times.size() / 2];
  measurement.min_ms = times.front();
  return measurement;
}

// The yardstick of a memory-bound impl: a device-to-device copy moving the same bytes (half read,
// half written), timed by the same method (rotated sets larger than L2, warm-up, event-timed
// median). bytes_moved is what the impl's measurement reports.
inline BenchMeasurement time_same_bytes_copy(double bytes_moved, const BenchSettings& settings) {
  const std::size_t copy_bytes =
      std::max<std::size_t>(static_cast<std::size_t>(bytes_moved / 2), 16);
  const std::size_t sets = rotation_sets(2 * copy_bytes, settings);
  std::vector<cuda::DeviceBuffer> sources, destinations;
  for (std::size_t s = 0; s < sets; ++s) {
    sources.emplace_back(copy_bytes);
    sources.back().fill_bytes(0x3c);
    destinations.emplace_back(copy_bytes);
  }
  BenchMeasurement measurement = time_rotated(settings, sets, [&](std::size_t s) {
    cuda::copy_device_to_device(destinations[s].get(), sources[s].get(), copy_bytes);
  });
  measurement.bytes_moved = 2.0 * static_cast<double>(copy_bytes);
  measurement.config = {{"rotated_sets", sets}};
  return measurement;
}

}  // namespace bitcheck::cuda_bench
