// Device slots as flock'ed lock files (device_slots.h).
#include "run/device_slots.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace bitcheck {
namespace {

struct Setting {
  std::string directory;
  int slots = 0;
};

// The variable's directory and count; slots 0 when unset or malformed (no bound).
Setting setting() {
  const char* value = std::getenv(device_slots_variable);
  if (!value || !*value) return {};
  const std::string text = value;
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return {};
  char* end = nullptr;
  const long slots = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (!end || *end || slots <= 0) return {};
  return {text.substr(0, colon), static_cast<int>(slots)};
}

std::string slot_path(const std::string& directory, int slot) {
  return directory + "/slot-" + std::to_string(slot);
}

}  // namespace

int device_slot_count(int workers, int requested) {
  return requested > 0 && workers > requested ? requested : 0;
}

std::string make_device_slots(const std::string& directory, int slots) {
  std::filesystem::create_directories(directory);
  for (int slot = 0; slot < slots; ++slot) {
    std::ofstream file(slot_path(directory, slot));
    if (!file)
      throw std::runtime_error("cannot create the device slot " + slot_path(directory, slot));
  }
  return directory + ":" + std::to_string(slots);
}

DeviceSlot::DeviceSlot() {
  const Setting s = setting();
  std::vector<int> fds;
  for (int slot = 0; slot < s.slots; ++slot) {
    const int fd = ::open(slot_path(s.directory, slot).c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) fds.push_back(fd);
  }
  // Every slot without blocking, again and again after a short sleep, so whichever slot frees up
  // first is taken (blocking on one slot would wait for that one). No slot file: no bound (the
  // sweep that made them has ended).
  auto pause = std::chrono::microseconds(50);
  while (!fds.empty() && fd_ < 0) {
    for (int fd : fds) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        fd_ = fd;
        break;
      }
    }
    if (fd_ >= 0) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  for (int fd : fds) {
    if (fd != fd_) ::close(fd);
  }
}

DeviceSlot::~DeviceSlot() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace bitcheck
