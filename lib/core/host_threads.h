// The threads one bitcheck process may use for host work (inputs, references): the hardware's, or
// BITCHECK_HOST_THREADS. `sweep --devices` gives each of its shards the hardware's share (cores /
// shards, twice that for shards waiting on GPUs) unless the variable is set, so a dozen shards do
// not each start a thread per core for their inputs and references.
#pragma once
#include <cstddef>

namespace bitcheck {

inline constexpr const char* host_threads_variable = "BITCHECK_HOST_THREADS";

// BITCHECK_HOST_THREADS when set (a count >= 1; anything else is BadInput naming the variable),
// else std::thread::hardware_concurrency() (at least 1).
std::size_t host_threads();

}  // namespace bitcheck
