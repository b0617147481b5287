// The shards of `sweep --devices` share the host's memory. A case whose worker the kernel's OOM
// killer ended (SIGKILL that bitcheck did not send) is retried once alone: the gate stops every
// shard from starting a case, the retry waits for the cases in flight to end, runs, and opens the
// gate again. Two lock files beside the shard queue: `QUEUE.gate` (held shared for a moment before
// a case starts, exclusively by a retry) and `QUEUE.running` (held shared while a case runs,
// exclusively by a retry).
#pragma once
#include <string>

namespace bitcheck {

class HostMemoryGate {
 public:
  // `queue`: the shard queue's path (the shards' common file); empty: no gate (one process).
  explicit HostMemoryGate(const std::string& queue);
  ~HostMemoryGate();
  HostMemoryGate(const HostMemoryGate&) = delete;
  HostMemoryGate& operator=(const HostMemoryGate&) = delete;
  bool enabled() const { return gate_ >= 0; }

  // Held while one case runs beside the other shards' cases.
  class Shared {
   public:
    explicit Shared(const HostMemoryGate& gate);
    ~Shared();
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;

   private:
    const HostMemoryGate& gate_;
  };
  // Held while one case runs with no other shard's case in flight.
  class Alone {
   public:
    explicit Alone(const HostMemoryGate& gate);
    ~Alone();
    Alone(const Alone&) = delete;
    Alone& operator=(const Alone&) = delete;

   private:
    const HostMemoryGate& gate_;
  };

 private:
  int gate_ = -1, running_ = -1;
};

}  // namespace bitcheck
