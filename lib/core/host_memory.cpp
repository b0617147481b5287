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

namespace {

// The number of kB on the line of `path` that starts with `field` (as /proc writes them), in
// bytes, or nothing where the file or the line is missing.
std::optional<std::uint64_t> proc_field_bytes(const char* path, const std::string& field) {
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    if (line.rfind(field, 0) != 0) continue;
    return std::strtoull(line.c_str() + field.size(), nullptr, 10) * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> available_host_memory_bytes() {
  if (const char* test = std::getenv(test_available_host_memory_variable); test && *test)
    return std::strtoull(test, nullptr, 10);
  return proc_field_bytes("/proc/meminfo", "MemAvailable:");
}

std::optional<std::uint64_t> peak_host_memory_bytes() {
  const std::optional<std::uint64_t> peak = proc_field_bytes("/proc/self/status", "VmHWM:");
  if (peak == std::uint64_t{0}) return std::nullopt;
  return peak;
}

}  // namespace bitcheck
