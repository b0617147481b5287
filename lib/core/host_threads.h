// The threads one bitcheck process may use for host work (inputs, references): the hardware's, or
// BITCHECK_HOST_THREADS. `sweep --devices` gives each of its shards the hardware's share (cores /
// shards, twice that for shards waiting on GPUs) unless the variable is set, so a dozen shards do
// not each start a thread per core for their inputs and references.
#pragma once
#include <cstddef>
#include <functional>

namespace bitcheck {

inline constexpr const char* host_threads_variable = "BITCHECK_HOST_THREADS";
// How many processes share this process's GPU: `sweep --devices` sets it for shards that share
// one, and device caches keep to their share of the GPU's memory (cuda_support::ParameterCache).
inline constexpr const char* shards_on_device_variable = "BITCHECK_SHARDS_ON_DEVICE";
// Its value when it is a count >= 1, else 1 (this process alone on its GPU).
std::size_t shards_on_device();

// BITCHECK_HOST_THREADS when set (a count >= 1; anything else is BadInput naming the variable),
// else std::thread::hardware_concurrency() (at least 1).
std::size_t host_threads();

// The most threads one piece of a case's host work takes (a reference, a check, a fill).
inline constexpr std::size_t most_threads_per_task = 8;

// The threads for `items` independent items of host work: host_threads(), at most
// most_threads_per_task and `items`, at least 1.
std::size_t threads_for(std::size_t items);

// Calls work(i) for every i in [0, count) on `threads` threads, this one among them, each taking
// the next i; returns when every item is done and rethrows the exception of the lowest item that
// threw. The caller makes each item's result independent of the thread that computes it.
void run_on_threads(std::size_t count, std::size_t threads,
                    const std::function<void(std::size_t)>& work);

// Calls work(first, last) over [0, total) in parts of whole `unit`s, one part per thread of
// threads_for(total / floor): at once on this thread when total is under two `floor`s (without
// asking host_threads(), which reads the environment and the CPU count).
void run_in_parts(std::size_t total, std::size_t unit, std::size_t floor,
                  const std::function<void(std::size_t, std::size_t)>& work);

}  // namespace bitcheck
