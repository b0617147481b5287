// Where a case's time goes: per phase (inputs, staging, uploads, impl calls, downloads, references,
// comparisons, bookkeeping, device waits, comparisons on the device) the seconds spent and the
// bytes moved. Kept free of heavy includes: device code (.cu host code) records its transfers
// through it, as it records paths.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace bitcheck {

enum class Phase {
  inputs,       // the counter-based generator: logical inputs and parameters
  staging,      // host copies of rows into each invocation's slots and of outputs back by row
  uploads,      // host to device copies made by impls
  impl_calls,   // Impl::run, less the uploads, downloads and bookkeeping recorded inside it
  downloads,    // device to host copies made by impls
  references,   // the FP32 reference
  comparisons,  // invariance, determinism and accuracy checks, and the fingerprint
  bookkeeping,  // a composite impl's own work between its calls (the chain)
  device_wait,  // waiting for a device slot before an impl call (workers sharing one GPU)
  // outputs compared where the impl left them (core/device_output.h): the bytes read there on
  // both sides, never brought to the host
  device_comparisons,
};
constexpr std::size_t phase_count = 10;
const char* phase_name(Phase phase);  // "inputs", "staging", ..., as reports write them
std::optional<Phase> parse_phase(const std::string& name);

struct PhaseCost {
  double seconds = 0;
  std::uint64_t bytes = 0;
};

struct PhaseProfile {
  std::array<PhaseCost, phase_count> phases{};

  PhaseCost& operator[](Phase phase) { return phases[static_cast<std::size_t>(phase)]; }
  const PhaseCost& operator[](Phase phase) const { return phases[static_cast<std::size_t>(phase)]; }
  void add(Phase phase, double seconds, std::uint64_t bytes = 0);
  PhaseProfile& operator+=(const PhaseProfile& other);
  double total_seconds() const;
};

// Adds to the profile this thread records into (PhaseRecording), if any: device code records its
// uploads and downloads, a composite impl its bookkeeping, while an impl call runs.
void record_phase(Phase phase, double seconds, std::uint64_t bytes = 0);

// While alive, this thread's record_phase calls add to `profile` (nested: the innermost).
class PhaseRecording {
 public:
  explicit PhaseRecording(PhaseProfile& profile);
  ~PhaseRecording();
  PhaseRecording(const PhaseRecording&) = delete;
  PhaseRecording& operator=(const PhaseRecording&) = delete;

 private:
  PhaseProfile* previous_;
};

// Times a scope and records it as `phase` with `bytes` when it ends.
class PhaseTimer {
 public:
  explicit PhaseTimer(Phase phase, std::uint64_t bytes = 0)
      : phase_(phase), bytes_(bytes), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  Phase phase_;
  std::uint64_t bytes_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace bitcheck
