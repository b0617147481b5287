// Test-only CPU impls. matmul/test-crash: a CPU impl that kills its process with SIGSEGV, as a
// host-side out-of-bounds access would. Test only (BITCHECK_TEST_IMPLS=1): it proves that an
// isolated sweep records the case as `error`, naming the signal, and runs every other case.
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <stdexcept>
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
