// Host memory kept for reuse (core/host_memory.h): a large block freed and allocated again comes
// back without a page fault per page.
#include <sys/mman.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/host_memory.h"

using namespace bitcheck;

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Minor page faults taken while allocating `bytes`, writing every byte and freeing it.
long faults_of_a_block(std::size_t bytes) {
  const long before = minor_faults();
  {
    std::unique_ptr<char[]> block(new char[bytes]);
    std::memset(block.get(), 1, bytes);
    REQUIRE(block[bytes - 1] == 1);
  }
  return minor_faults() - before;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

}  // namespace

TEST_CASE("keep_host_memory: BITCHECK_KEEP_HOST_MEMORY=0 leaves the allocator alone",
          "[host-memory]") {
  setenv(keep_host_memory_variable, "0", 1);
  CHECK_FALSE(keep_host_memory());
  unsetenv(keep_host_memory_variable);
}

TEST_CASE("keep_host_memory: a freed 256 MiB block is reused without faulting its pages in again",
          "[host-memory]") {
#if !defined(__GLIBC__)
  WARN("not glibc: keep_host_memory does nothing");
  return;
#endif
  if (sanitized) {
    WARN("AddressSanitizer replaces the allocator");
    return;
  }
  REQUIRE(keep_host_memory());
  constexpr std::size_t bytes = std::size_t(256) << 20;  // 65536 pages of 4 KiB
  faults_of_a_block(bytes);                              // the first time: faulted in
  const long again = faults_of_a_block(bytes);
  INFO("minor faults the second time: " << again);
  CHECK(again < 2048);
}

TEST_CASE("a case's peak host memory: reset, then the high-water mark of what was touched",
          "[host-memory]") {
  if (!reset_peak_host_memory()) {
    WARN("/proc/self/clear_refs cannot reset the peak here");
    return;
  }
  const auto before = peak_host_memory_bytes();
  REQUIRE(before.has_value());
  constexpr std::size_t bytes = std::size_t(256) << 20;
  void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(block != MAP_FAILED);
  std::memset(block, 1, bytes);
  munmap(block, bytes);
  const auto during = peak_host_memory_bytes();
  REQUIRE(during.has_value());
  CHECK(*during >= *before + bytes * 3 / 4);  // the block's pages were resident at once
  REQUIRE(reset_peak_host_memory());
  const auto after = peak_host_memory_bytes();
  REQUIRE(after.has_value());
  CHECK(*after + bytes / 2 < *during);  // the reset forgot the block
}
