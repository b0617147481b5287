// libbitcheck-nccl-profiler.so: an NCCL profiler plugin (API version 4, which NCCL 2.24 and later
// load) that keeps, for every collective NCCL starts, the function, algorithm, protocol and channel
// count it chose, until bitcheck takes them (bitcheck_nccl_profiler_take). It starts no timers and
// keeps no other events. The types below restate the plugin interface of NCCL's documentation
// (ext-profiler/README.md) for this one version.
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

namespace {

using Result = int;  // ncclResult_t: 0 = ncclSuccess
constexpr Result success = 0;
constexpr int collective_event = 1 << 1;  // ncclProfileColl
using Logger = void (*)(int level, unsigned long flags, const char* file, int line,
                        const char* format, ...);

struct EventDescription {
  std::uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      std::uint64_t sequence;
      const char* function;
      const void* send;
      void* receive;
      std::size_t count;
      int root;
      const char* datatype;
      std::uint8_t channels;
      std::uint8_t warps;
      const char* algorithm;
      const char* protocol;
    } collective;
    // The other event types are larger than none of these fields need: room for them.
    char other[128];
  };
};

struct Plugin {
  const char* name;
  Result (*init)(void** context, int* activation_mask, const char* comm_name,
                 std::uint64_t comm_hash, int nodes, int ranks, int rank, Logger log);
  Result (*start_event)(void* context, void** handle, EventDescription* description);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, int state, void* arguments);
  Result (*finalize)(void* context);
};

std::mutex lock;
std::string choices;  // "function algorithm protocol channels\n" per collective

Result init(void** context, int* activation_mask, const char*, std::uint64_t, int, int, int,
            Logger) {
  *context = nullptr;
  *activation_mask = collective_event;
  return success;
}

Result start_event(void*, void** handle, EventDescription* description) {
  *handle = nullptr;
  if (description->type != collective_event) return success;
  const auto& c = description->collective;
  std::lock_guard<std::mutex> guard(lock);
  choices += std::string(c.function ? c.function : "?") + " " + (c.algorithm ? c.algorithm : "?") +
             " " + (c.protocol ? c.protocol : "?") + " " +
             std::to_string(static_cast<int>(c.channels)) + "\n";
  return success;
}

Result stop_event(void*) {
  return success;
}
Result record_event_state(void*, int, void*) {
  return success;
}
Result finalize(void*) {
  return success;
}

}  // namespace

extern "C" {

__attribute__((visibility("default")))
Plugin ncclProfiler_v4 = {"bitcheck", init, start_event, stop_event, record_event_state, finalize};

// Copies what the plugin saw since the last call into `buffer` (at most `size` bytes, the lines
// that fit) and forgets it. Returns the bytes written.
__attribute__((visibility("default"))) int bitcheck_nccl_profiler_take(char* buffer, int size) {
  std::lock_guard<std::mutex> guard(lock);
  std::size_t length = std::min<std::size_t>(choices.size(), static_cast<std::size_t>(size));
  length = choices.rfind('\n', length == 0 ? 0 : length - 1) + 1;
  if (length > choices.size()) length = 0;
  std::memcpy(buffer, choices.data(), length);
  choices.erase(0, length);
  return static_cast<int>(length);
}
}
