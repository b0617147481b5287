// Memory limits: a case whose tensors cannot fit in the device's free memory, or a CPU case whose
// tensors cannot fit in the host's available memory, is skipped with the reason ("needs ~N GiB of
// device memory, M GiB free") before anything is allocated, instead of failing half-way with an
// out-of-memory error or std::bad_alloc. One estimate for every impl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"

namespace bitcheck {

// Bytes of every tensor of the case on the device: row tensors at `rows` rows, parameters and
// reduction outputs whole, plus the impl's declared workspace.
std::size_t device_footprint_bytes(const std::vector<TensorDecl>& decls, std::int64_t rows,
                                   std::size_t workspace_bytes = 0);

// Room kept free beside the tensors (allocator rounding, library handles, staging buffers the
// impls do not declare): 512 MiB plus 1/16 of the free memory.
std::size_t device_memory_margin(std::size_t free_bytes);

// The skip reason when `needed_bytes` plus the margin do not fit in `free_bytes`, else nullopt.
// `memory` names what runs short ("device", "host").
std::optional<std::string> device_memory_shortfall(std::size_t needed_bytes, std::size_t free_bytes,
                                                   const std::string& memory = "device");

// A host-side case holds each tensor several times at once: the logical inputs and a physical copy
// of an invocation, and the outputs of the canonical layout, of the layout compared with it, of the
// invocation being run and of a determinism repeat.
constexpr std::size_t host_copies_per_tensor = 4;

// The host's available memory now (MemAvailable of /proc/meminfo, else the free pages), or nullopt
// where neither can be read.
std::optional<std::size_t> host_available_memory_bytes();

// For a case of a device impl (CUDA): its footprint at the case's logical rows against the free
// memory of the impl's device backend in `registry`. For an impl of a backend without a device
// (the CPU): host_copies_per_tensor times its footprint against the host's available memory.
// nullopt when it fits, or when the free memory cannot be read.
std::optional<std::string> device_memory_skip_reason(const Registry& registry, const OpDef& op,
                                                     const Impl& impl, const CaseSpec& spec);

// Whether a case's outputs may stay on its impl's device (Batch::rows_stay_on_device,
// reductions_stay_on_device): the
// canonical layouts' stay there for the whole case (the alone layout's rows, the batch layout's
// rows and reductions) while each other layout makes its own beside them, so the case's
// footprint plus two more sets of outputs must fit. Always for a backend without a device
// (nothing there to run short).
bool outputs_may_stay_on_device(const Registry& registry, const OpDef& op, const Impl& impl,
                                const CaseSpec& spec);

// Whether this process shares its GPU with other shards of a sweep (BITCHECK_SHARDS_ON_DEVICE
// above 1, set by `sweep --devices`). Then each wait for the GPU lasts while the others' work runs,
// so the device paths made of many small operations (row inputs placed in every invocation's
// slots, the chain's glue between calls) give way to the host's copies.
bool device_shared_by_shards();

}  // namespace bitcheck
