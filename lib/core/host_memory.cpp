// Host memory kept for reuse (core/host_memory.h).
#include "core/host_memory.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace bitcheck {

bool keep_host_memory() {
  if (const char* value = std::getenv(keep_host_memory_variable);
      value && std::strcmp(value, "0") == 0)
    return false;
#if defined(__GLIBC__)
  constexpr int threshold = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, threshold) == 1 && mallopt(M_TRIM_THRESHOLD, threshold) == 1;
#else
  return false;
#endif
}

bool reset_peak_host_memory() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

std::optional<std::uint64_t> available_host_memory_bytes() {
  if (const char* test = std::getenv(test_available_host_memory_variable); test && *test)
    return std::strtoull(test, nullptr, 10);
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    return std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> peak_host_memory_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    const std::uint64_t kib = std::strtoull(line.c_str() + 6, nullptr, 10);
    if (kib == 0) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace bitcheck
