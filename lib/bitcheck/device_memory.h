// Device-memory limit: a case whose tensors cannot fit in the device's free memory is skipped with
// the reason ("needs ~N GiB of device memory, M GiB free") before anything is allocated, instead of
// failing half-way with an out-of-memory error. One estimate for every device impl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bitcheck/op.h"

namespace bitcheck {

// Bytes of every tensor of the case on the device: row tensors at `rows` rows, parameters and
// reduction outputs whole, plus the impl's declared workspace.
std::size_t device_footprint_bytes(const std::vector<TensorDecl>& decls, std::int64_t rows,
                                   std::size_t workspace_bytes = 0);

// Room kept free beside the tensors (allocator rounding, library handles, staging buffers the
// impls do not declare): 512 MiB plus 1/16 of the free memory.
std::size_t device_memory_margin(std::size_t free_bytes);

// The skip reason when `needed_bytes` plus the margin do not fit in `free_bytes`, else nullopt.
std::optional<std::string> device_memory_shortfall(std::size_t needed_bytes,
                                                   std::size_t free_bytes);

// For a case of a device impl (CUDA): its footprint at the case's logical rows against the free
// memory of the impl's device backend in `registry`. nullopt when it fits, or when the impl's
// backend has no device memory to run out of.
std::optional<std::string> device_memory_skip_reason(const Registry& registry, const OpDef& op,
                                                     const Impl& impl, const CaseSpec& spec);

}  // namespace bitcheck
