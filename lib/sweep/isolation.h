// Fault isolation for sweeps: cases run in a worker process (the hidden `bitcheck __sweep-worker`
// subcommand) that streams one JSON result per case back over a socket. A worker that dies (a
// signal, an abort) or whose CUDA context a sticky error poisoned costs only the case in flight:
// that case becomes `error` with the signal or the CUDA error text, and a fresh worker runs the
// rest.
#pragma once
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/op.h"
#include "core/run_settings.h"
#include "run/runner.h"

namespace bitcheck {

struct WorkerSettings {
  std::string executable;     // the bitcheck binary that has the __sweep-worker subcommand
  std::string contract_path;  // empty: the embedded contract
  RunSettings run;            // the worker starts the run with these
  // A case whose result has not come back after this many seconds is `error` and its worker is
  // killed (a hung kernel or host loop); 0: no limit.
  double case_timeout_seconds = 0;
};

// One case run in this process, as the report records it. `context_fault` is set when the case
// left the CUDA context poisoned (a sticky error): no later CUDA call in this process can be
// trusted.
struct CheckedCase {
  CaseResult result;
  std::optional<std::string> context_fault;
};
CheckedCase run_case_checked(Runner& runner, const Registry& registry, const CaseSpec& spec);

// A case that could not produce a result of its own: `error`, with the reason.
CaseResult failed_case(const Registry& registry, const CaseSpec& spec, const std::string& reason,
                       double seconds);

// The parent's side: one worker for many cases, restarted only after a fault.
class IsolatedRunner {
 public:
  IsolatedRunner(const Registry& registry, WorkerSettings settings);
  ~IsolatedRunner();  // ends the worker (it writes derived cuBLASLt pins back when asked)
  IsolatedRunner(const IsolatedRunner&) = delete;
  IsolatedRunner& operator=(const IsolatedRunner&) = delete;

  // The case's result, read back from the worker's line. Throws only when a worker cannot be
  // started.
  CaseResult run_case(const CaseSpec& spec);
  int workers_started() const { return workers_started_; }
  int faults() const { return faults_; }
  // The last case's worker died of a SIGKILL that bitcheck did not send (the kernel's OOM killer,
  // most likely): a retry with fewer cases beside it may pass.
  bool last_worker_killed_from_outside() const { return killed_from_outside_; }

 private:
  void start_worker();  // throws when the worker cannot be started or does not report ready
  void stop();          // end of input, a grace period to exit, then SIGKILL
  // Waits for the worker to exit and says how it ended ("was killed by signal 11 (SIGSEGV: ...)").
  std::string reap();

  const Registry& registry_;
  WorkerSettings settings_;
  pid_t pid_ = -1;
  int socket_ = -1;
  std::string buffer_;
  int workers_started_ = 0;
  int faults_ = 0;
  int last_status_ = 0;  // the wait status reap() saw
  bool killed_from_outside_ = false;
};

// The worker's side (`bitcheck __sweep-worker --fd N`): reads the settings, then one case per line
// from the socket `fd`, and writes one result per line. Returns the process exit code.
int run_sweep_worker(const Registry& registry, int fd);

// "SIGSEGV" for 11, "signal N" for a number without a known name.
std::string signal_name(int signal_number);

}  // namespace bitcheck
