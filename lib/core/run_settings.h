// What a user sets for a whole run (a sweep, a worker, bench, repro, minimize) and the hooks
// through which the ops that need it are set up before the run plans or runs a case and finished at
// its end.
#pragma once
#include <functional>
#include <string>

namespace bitcheck {

class Registry;

// The user's settings of a run, as the command line gives them.
struct RunSettings {
  std::string pins = "contract/pins";  // --pins: the pinned configurations (a directory or a file)
  bool write_pins = false;             // --write-pins: pins derived during the run written back
  bool provenance = false;  // --provenance: the kernels every call launched, recorded (CUPTI)
};

// An op's part in a run (Registry::add_run_hook): `start` before the run plans its cases (an
// impl's switch points may depend on the settings) or runs one, `finish` at the run's end.
struct RunHook {
  std::function<void(const RunSettings&)> start;
  std::function<void()> finish;
};

// Every registered hook's start, in registration order.
void start_run(const Registry& registry, const RunSettings& settings);
// Every registered hook's finish, in registration order.
void finish_run(const Registry& registry);

}  // namespace bitcheck
