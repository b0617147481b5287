// The shards' host memory gate (sweep/host_gate.h): flock(2) on two files beside the shard queue.
#include "sweep/host_gate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace bitcheck {
namespace {

int open_lock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot open the shards' lock file " + path);
  return fd;
}

void lock(int fd, int operation) {
  if (fd < 0) return;
  while (::flock(fd, operation) != 0) {
    if (errno != EINTR) throw std::runtime_error("flock on a shards' lock file failed");
  }
}

}  // namespace

HostMemoryGate::HostMemoryGate(const std::string& queue) {
  if (queue.empty()) return;
  gate_ = open_lock(queue + ".gate");
  running_ = open_lock(queue + ".running");
}

HostMemoryGate::~HostMemoryGate() {
  if (gate_ >= 0) ::close(gate_);
  if (running_ >= 0) ::close(running_);
}

HostMemoryGate::Hold::Hold(const HostMemoryGate& gate, bool alone) : gate_(gate), alone_(alone) {
  if (alone_) {
    lock(gate_.gate_, LOCK_EX);     // no shard starts a case
    lock(gate_.running_, LOCK_EX);  // the cases in flight have ended
    return;
  }
  // Through the gate (closed while a case waits to run alone, or runs), then among the running.
  lock(gate_.gate_, LOCK_SH);
  lock(gate_.running_, LOCK_SH);
  lock(gate_.gate_, LOCK_UN);
}

HostMemoryGate::Hold::~Hold() {
  if (gate_.running_ >= 0) ::flock(gate_.running_, LOCK_UN);
  if (alone_ && gate_.gate_ >= 0) ::flock(gate_.gate_, LOCK_UN);
}

}  // namespace bitcheck
