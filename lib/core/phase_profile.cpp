// The phase profile's names, sums and this thread's recording target.
#include "core/phase_profile.h"

namespace bitcheck {
namespace {

constexpr std::array<const char*, phase_count> phase_names = {
    "inputs",     "staging",     "uploads",     "impl_calls",  "downloads",
    "references", "comparisons", "bookkeeping", "device_wait", "device_comparisons"};

thread_local PhaseProfile* recording_profile = nullptr;

}  // namespace

const char* phase_name(Phase phase) {
  return phase_names[static_cast<std::size_t>(phase)];
}

std::optional<Phase> parse_phase(const std::string& name) {
  for (std::size_t i = 0; i < phase_count; ++i) {
    if (name == phase_names[i]) return static_cast<Phase>(i);
  }
  return std::nullopt;
}

void PhaseProfile::add(Phase phase, double seconds, std::uint64_t bytes) {
  PhaseCost& cost = (*this)[phase];
  cost.seconds += seconds;
  cost.bytes += bytes;
}

PhaseProfile& PhaseProfile::operator+=(const PhaseProfile& other) {
  for (std::size_t i = 0; i < phase_count; ++i) {
    phases[i].seconds += other.phases[i].seconds;
    phases[i].bytes += other.phases[i].bytes;
  }
  return *this;
}

double PhaseProfile::total_seconds() const {
  double seconds = 0;
  for (const PhaseCost& cost : phases) seconds += cost.seconds;
  return seconds;
}

void record_phase(Phase phase, double seconds, std::uint64_t bytes) {
  if (recording_profile) recording_profile->add(phase, seconds, bytes);
}

PhaseRecording::PhaseRecording(PhaseProfile& profile) : previous_(recording_profile) {
  recording_profile = &profile;
}

PhaseRecording::~PhaseRecording() {
  recording_profile = previous_;
}

PhaseTimer::~PhaseTimer() {
  record_phase(phase_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
               bytes_);
}

}  // namespace bitcheck
