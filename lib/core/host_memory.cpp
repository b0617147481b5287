// Host memory kept for reuse (core/host_memory.h).
#include "core/host_memory.h"

#include <cstdlib>
#include <cstring>

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

}  // namespace bitcheck
