// The shards of `sweep --devices` share the host's memory. A case whose worker the kernel's OOM
// killer ended (SIGKILL that bitcheck did not send) is retried once alone, and with --costs a case
// that needed more than the host has available runs alone from the start: the gate stops every
// shard from starting a case, the case waits for those in flight to end, runs, and opens the gate
// again. Two lock files beside the shard queue: `QUEUE.gate` (held shared for a moment before
// a case starts, exclusively by a case run alone) and `QUEUE.running` (held shared while a case
// runs, exclusively by a case run alone).
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

  // Held while one case runs: beside the other shards' cases, or `alone` (none in flight, none
  // starting).
  class Hold {
   public:
    Hold(const HostMemoryGate& gate, bool alone);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    const HostMemoryGate& gate_;
    bool alone_;
  };

 private:
  int gate_ = -1, running_ = -1;
};

}  // namespace bitcheck
