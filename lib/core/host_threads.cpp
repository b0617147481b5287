// The host thread budget of this process (core/host_threads.h).
#include "core/host_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace bitcheck {

std::size_t shards_on_device() {
  const char* text = std::getenv(shards_on_device_variable);
  if (!text) return 1;
  char* end = nullptr;
  const unsigned long count = std::strtoul(text, &end, 10);
  return end != text && *end == '\0' && count >= 1 ? count : 1;
}

std::size_t host_threads() {
  if (const char* value = std::getenv(host_threads_variable)) {
    char* end = nullptr;
    const unsigned long count = std::strtoul(value, &end, 10);
    if (end == value || *end != '\0' || count == 0) {
      throw BadInput("environment", host_threads_variable,
                     "a thread count >= 1, got \"" + std::string(value) + "\"");
    }
    return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::size_t threads_for(std::size_t items) {
  return std::max<std::size_t>(1, std::min({host_threads(), most_threads_per_task, items}));
}

void run_on_threads(std::size_t count, std::size_t threads,
                    const std::function<void(std::size_t)>& work) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  auto take = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        work(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> workers;
  for (std::size_t t = 1; t < std::min(threads, count); ++t) workers.emplace_back(take);
  take();
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

void run_in_parts(std::size_t total, std::size_t unit, std::size_t floor,
                  const std::function<void(std::size_t, std::size_t)>& work) {
  if (total < 2 * floor) return work(0, total);
  const std::size_t parts = threads_for(total / floor);
  if (parts <= 1) return work(0, total);
  const std::size_t step = (total / unit + parts - 1) / parts * unit;
  run_on_threads(parts, parts, [&](std::size_t part) {
    const std::size_t first = part * step;
    if (first < total) work(first, std::min(total, first + step));
  });
}

}  // namespace bitcheck
