// Host memory kept for reuse: bitcheck allocates and frees the same large tensors over and over
// (a layout's staged inputs and poisoned outputs, downloads, comparisons), and glibc returns
// every block of more than a few MB to the system when it is freed, so the next one pays a page
// fault per 4 KiB page again (on a 2-core VM about 5 s per GB, more than the copy it is for).
// keep_host_memory() raises glibc's mmap and trim thresholds to 1 GiB: blocks up to that size
// come from the heap and freed memory stays there, up to 1 GiB free at its top, for the next
// allocation. Peak memory is unchanged; what is freed is not returned at once.
#pragma once
#include <cstdint>
#include <optional>

namespace bitcheck {

inline constexpr const char* keep_host_memory_variable = "BITCHECK_KEEP_HOST_MEMORY";

// Called first thing by main: sets the thresholds unless BITCHECK_KEEP_HOST_MEMORY is 0 (or the
// C library is not glibc). Returns whether it did.
bool keep_host_memory();

// A case's host memory: the process's peak resident set is reset when the case starts (Linux:
// "5" written to /proc/self/clear_refs) and read when it ends (VmHWM in /proc/self/status). The
// peak includes what the process holds across cases (cached parameters and references, freed
// memory kept for reuse, the device runtime's host side). Returns whether the reset took effect.
bool reset_peak_host_memory();
// VmHWM in bytes, or nothing where /proc cannot tell.
std::optional<std::uint64_t> peak_host_memory_bytes();

inline constexpr const char* test_available_host_memory_variable =
    "BITCHECK_TEST_AVAILABLE_HOST_BYTES";
// The memory the host can still hand out (MemAvailable in /proc/meminfo), or nothing where /proc
// cannot tell. Tests set BITCHECK_TEST_AVAILABLE_HOST_BYTES to stand in for it.
std::optional<std::uint64_t> available_host_memory_bytes();

}  // namespace bitcheck
