// The benchmark method every CUDA impl's Impl::benchmark uses, in one place so all ratios in a
// bench table are measured alike: enough rotated input sets that the caches do not hold the working
// set, warm-up, then the median (and minimum) of CUDA-event-timed launches.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "bitcheck/op.h"
#include "runtime.h"

namespace bitcheck::cuda_bench {

// Copies of a `set_bytes` working set to rotate through so together they exceed
// settings.rotate_bytes (at most 64, and at most half the free device memory).
inline std::size_t rotation_sets(std::size_t set_bytes, const BenchSettings& settings) {
  set_bytes = std::max<std::size_t>(set_bytes, 1);
  std::size_t sets = std::clamp<std::size_t>((settings.rotate_bytes + set_bytes - 1) / set_bytes + 1, 1, 64);
  return std::min<std::size_t>(sets, std::max<std::size_t>(1, cuda::free_device_memory() / 2 / set_bytes));
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

}  // namespace bitcheck::cuda_bench
