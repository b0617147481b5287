// Test-only CPU impls. matmul/test-crash: a CPU impl that kills its process with SIGSEGV, as a
// host-side out-of-bounds access would. Test only (BITCHECK_TEST_IMPLS=1): it proves that an
// isolated sweep records the case as `error`, naming the signal, and runs every other case.
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/op.h"
#include "testing/testing.h"

namespace bitcheck {
namespace {

class CrashingCpu : public Impl {
 public:
  using Impl::Impl;
  void run(Batch&) override {
    // A deliberate crash leaves no core file, and no handler (a sanitizer's) turns it into an exit.
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
    throw std::logic_error("SIGSEGV did not end the process");
  }
};

// matmul/test-hang: never returns, as a kernel stuck in a spin-wait would; proves --case-timeout.
class HangingCpu : public Impl {
 public:
  using Impl::Impl;
  void run(Batch&) override {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
};

// matmul/test-killed-once: the first run of each case (no marker file of its id in
// BITCHECK_TEST_KILL_ONCE_DIR yet) ends its process with SIGKILL, as the kernel's OOM killer would;
// later runs leave the marker and compute as cpu-fixed-order. Proves the shards' retry alone.
// Registered only with BITCHECK_TEST_IMPLS=1 and BITCHECK_TEST_KILL_ONCE_DIR set.
class KilledOnceCpu : public Impl {
 public:
  KilledOnceCpu(ImplInfo info, const Registry& registry)
      : Impl(std::move(info)), registry_(registry) {}
  void run(Batch& batch) override {
    const char* dir = std::getenv("BITCHECK_TEST_KILL_ONCE_DIR");
    if (!dir || !*dir) throw std::runtime_error("BITCHECK_TEST_KILL_ONCE_DIR is not set");
    std::string id = batch.spec->id();
    for (char& c : id) {
      if (c == '/' || c == ',' || c == '=') c = '_';
    }
    const std::string marker = std::string(dir) + "/" + id;
    if (!std::ifstream(marker)) {
      std::ofstream(marker) << "killed once\n";
      std::raise(SIGKILL);
    }
    registry_.find_impl(batch.spec->op, "cpu-fixed-order")->run(batch);
  }

 private:
  const Registry& registry_;
};

}  // namespace

bool test_impls_enabled() {
  const char* value = std::getenv("BITCHECK_TEST_IMPLS");
  return value && std::string(value) == "1";
}

void register_test_impls_cpu(Registry& registry) {
  if (!test_impls_enabled()) return;
  registry.add_impl("matmul",
                    std::make_unique<CrashingCpu>(
                        ImplInfo::invariant("test-crash", "cpu",
                                            "test only (BITCHECK_TEST_IMPLS=1): raises SIGSEGV in "
                                            "run(), to prove fault isolation")
                            .only_passes({Pass::forward})));
  // Only with its marker directory (BITCHECK_TEST_KILL_ONCE_DIR): sweeps over every impl leave it.
  const char* kill_once = std::getenv("BITCHECK_TEST_KILL_ONCE_DIR");
  if (kill_once && *kill_once) {
    registry.add_impl("matmul", std::make_unique<KilledOnceCpu>(
                                    ImplInfo::invariant(
                                        "test-killed-once", "cpu",
                                        "test only (BITCHECK_TEST_IMPLS=1): each case's first run "
                                        "raises SIGKILL (as the OOM killer), later runs compute "
                                        "as cpu-fixed-order")
                                        .only_passes({Pass::forward}),
                                    registry));
  }
  // Only on request: every sweep over all impls would otherwise wait for it forever.
  const char* hang = std::getenv("BITCHECK_TEST_HANG");
  if (hang && std::string(hang) == "1") {
    registry.add_impl("matmul",
                      std::make_unique<HangingCpu>(
                          ImplInfo::invariant("test-hang", "cpu",
                                              "test only (BITCHECK_TEST_IMPLS=1 and "
                                              "BITCHECK_TEST_HANG=1): sleeps forever in run(), to "
                                              "prove the per-case timeout")
                              .only_passes({Pass::forward})));
  }
  register_test_ranks(registry);
}

void register_testing(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {nullptr, register_test_impls_cpu, BITCHECK_CUDA_PART(register_test_impls_cuda)});
}

}  // namespace bitcheck
