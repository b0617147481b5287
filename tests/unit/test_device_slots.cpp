// Device slots (run/device_slots.h): at most N holders at once, a waiter gets the first slot that
// frees up, no bound without the variable, and the count asked for.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "run/device_slots.h"

using namespace bitcheck;

namespace {

struct SlotsVariable {
  explicit SlotsVariable(const std::string& value) {
    ::setenv(device_slots_variable, value.c_str(), 1);
  }
  ~SlotsVariable() { ::unsetenv(device_slots_variable); }
};

std::string fresh_directory(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("bitcheck-slots-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(path);
  return path.string();
}

}  // namespace

TEST_CASE("device slots: at most N holders, a waiter takes the first slot freed", "[slots]") {
  const std::string directory = fresh_directory("bound");
  SlotsVariable variable(make_device_slots(directory, 2));
  std::optional<DeviceSlot> first, second;
  first.emplace();
  second.emplace();
  REQUIRE(first->held());
  REQUIRE(second->held());
  std::atomic<bool> third_held{false};
  std::thread waiter([&] {
    DeviceSlot third;
    third_held = third.held();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(third_held.load());  // both slots are taken: the third waits
  second.reset();
  waiter.join();
  CHECK(third_held.load());
  std::filesystem::remove_all(directory);
}

TEST_CASE("device slots: no variable, or no slot files, is no bound", "[slots]") {
  ::unsetenv(device_slots_variable);
  DeviceSlot free_slot;
  CHECK_FALSE(free_slot.held());
  SlotsVariable gone(fresh_directory("gone") + ":3");
  DeviceSlot no_files;
  CHECK_FALSE(no_files.held());
}

TEST_CASE("device slots: only as asked, and only where more workers share a device", "[slots]") {
  CHECK(device_slot_count(16, 0) == 0);
  CHECK(device_slot_count(16, 4) == 4);
  CHECK(device_slot_count(5, 4) == 4);
  CHECK(device_slot_count(4, 4) == 0);
  CHECK(device_slot_count(1, 8) == 0);
}
