// Host memory kept for reuse: bitcheck allocates and frees the same large tensors over and over
// (a layout's staged inputs and poisoned outputs, downloads, comparisons), and glibc returns
// every block of more than a few MB to the system when it is freed, so the next one pays a page
// fault per 4 KiB page again (on a 2-core VM about 5 s per GB, more than the copy it is for).
// keep_host_memory() raises glibc's mmap and trim thresholds to 1 GiB: blocks up to that size
// come from the heap and freed memory stays there, up to 1 GiB free at its top, for the next
// allocation. Peak memory is unchanged; what is freed is not returned at once.
#pragma once

namespace bitcheck {

inline constexpr const char* keep_host_memory_variable = "BITCHECK_KEEP_HOST_MEMORY";

// Called first thing by main: sets the thresholds unless BITCHECK_KEEP_HOST_MEMORY is 0 (or the
// C library is not glibc). Returns whether it did.
bool keep_host_memory();

}  // namespace bitcheck
