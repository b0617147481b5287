// The host thread budget of this process (core/host_threads.h).
#include "core/host_threads.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"

namespace bitcheck {

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

}  // namespace bitcheck
