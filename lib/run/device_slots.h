// A bound on how many sweep workers sharing one GPU are inside impl calls at once: lock files in a
// directory the parent sweep makes, one per slot, named to the workers by BITCHECK_DEVICE_SLOTS.
// A GPU time-slices between the processes that have work queued, so with a dozen workers on one
// GPU every small synchronous step of a call (a decode step's upload, launch and download) waits
// for the others' slices; with a few slots the rest of the workers do their host work meanwhile.
#pragma once
#include <string>

namespace bitcheck {

// "<directory>:<slots>" (the lock files are <directory>/slot-<i>); unset: no bound.
constexpr const char* device_slots_variable = "BITCHECK_DEVICE_SLOTS";

// The slots for `workers` processes on one device when the sweep asks for `requested` (0: no
// bound, the default): none where the workers are no more than the slots.
int device_slot_count(int workers, int requested);

// Makes `directory` with `slots` lock files; the value BITCHECK_DEVICE_SLOTS takes for them.
std::string make_device_slots(const std::string& directory, int slots);

// While alive, holds one slot of BITCHECK_DEVICE_SLOTS (waiting for one to be free), or nothing
// when the variable is unset. A lock dies with its process (flock), so a crashed worker never
// keeps a slot.
class DeviceSlot {
 public:
  DeviceSlot();
  ~DeviceSlot();
  DeviceSlot(const DeviceSlot&) = delete;
  DeviceSlot& operator=(const DeviceSlot&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace bitcheck
