// Memory limits: the footprint estimate of a case and the comparison with the device's free memory
// (device impls) or the host's available memory (CPU impls).
#include "run/device_memory.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/dtype.h"
#include "core/host_threads.h"

namespace bitcheck {
namespace {

std::string gibibytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f",
                static_cast<double>(bytes) / static_cast<double>(std::size_t(1) << 30));
  return text;
}

// Saturating: a shape far beyond any device must not wrap around to a small number.
std::size_t saturating_multiply(std::size_t a, std::size_t b) {
  if (a != 0 && b > SIZE_MAX / a) return SIZE_MAX;
  return a * b;
}

}  // namespace

std::size_t device_footprint_bytes(const std::vector<TensorDecl>& decls, std::int64_t rows,
                                   std::size_t workspace_bytes) {
  std::size_t total = workspace_bytes;
  for (const auto& decl : decls) {
    std::size_t elements = 1;
    for (std::int64_t extent : decl.shape)
      elements = saturating_multiply(elements, static_cast<std::size_t>(extent));
    if (decl.role == TensorRole::row_input || decl.role == TensorRole::row_output) {
      elements = saturating_multiply(elements, static_cast<std::size_t>(rows));
    }
    std::size_t bytes = saturating_multiply(elements, dtype_size(decl.dtype));
    total = total > SIZE_MAX - bytes ? SIZE_MAX : total + bytes;
  }
  return total;
}

std::size_t device_memory_margin(std::size_t free_bytes) {
  return (std::size_t(512) << 20) + free_bytes / 16;
}

std::optional<std::string> device_memory_shortfall(std::size_t needed_bytes, std::size_t free_bytes,
                                                   const std::string& memory) {
  const std::size_t margin = device_memory_margin(free_bytes);
  if (needed_bytes <= free_bytes && free_bytes - needed_bytes >= margin) return std::nullopt;
  return "needs ~" + gibibytes(needed_bytes) + " GiB of " + memory + " memory, " +
         gibibytes(free_bytes) + " GiB free (" + gibibytes(margin) + " GiB kept as margin)";
}

std::optional<std::size_t> host_available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string name;
    std::size_t kibibytes = 0;
    if (fields >> name >> kibibytes && name == "MemAvailable:") return kibibytes * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::nullopt;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

std::optional<std::string> device_memory_skip_reason(const Registry& registry, const OpDef& op,
                                                     const Impl& impl, const CaseSpec& spec) {
  const std::int64_t rows = op.logical_rows ? op.logical_rows(spec) : spec.rows;
  const std::size_t footprint =
      device_footprint_bytes(op.tensors(spec), rows, impl.device_workspace_bytes(spec));
  const DeviceBackend* device = registry.device_backend(impl.backend());
  if (!device) {
    std::optional<std::size_t> available = host_available_memory_bytes();
    if (!available) return std::nullopt;
    const std::size_t needed = footprint > SIZE_MAX / host_copies_per_tensor
                                   ? SIZE_MAX
                                   : footprint * host_copies_per_tensor;
    return device_memory_shortfall(needed, *available, "host");
  }
  std::optional<std::size_t> free_bytes = device->free_memory_bytes();
  if (!free_bytes) return std::nullopt;
  return device_memory_shortfall(footprint, *free_bytes);
}

bool outputs_may_stay_on_device(const Registry& registry, const OpDef& op, const Impl& impl,
                                const CaseSpec& spec) {
  const DeviceBackend* device = registry.device_backend(impl.backend());
  if (!device) return true;
  const std::vector<TensorDecl> decls = op.tensors(spec);
  std::vector<TensorDecl> outputs;
  for (const TensorDecl& decl : decls) {
    if (decl.role == TensorRole::reduction_output || decl.role == TensorRole::row_output)
      outputs.push_back(decl);
  }
  const std::int64_t rows = op.logical_rows ? op.logical_rows(spec) : spec.rows;
  const std::size_t footprint =
      device_footprint_bytes(decls, rows, impl.device_workspace_bytes(spec));
  const std::size_t one = device_footprint_bytes(outputs, rows);
  const std::size_t kept = one > SIZE_MAX / 2 ? SIZE_MAX : 2 * one;
  const std::size_t needed = footprint > SIZE_MAX - kept ? SIZE_MAX : footprint + kept;
  std::optional<std::size_t> free_bytes = device->free_memory_bytes();
  return free_bytes && !device_memory_shortfall(needed, *free_bytes);
}

bool device_shared_by_shards() {
  return shards_on_device() > 1;
}

}  // namespace bitcheck
