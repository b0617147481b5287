// matmul/test-crash: a CPU impl that kills its process with SIGSEGV, as a host-side out-of-bounds
// access would. Test only (BITCHECK_TEST_IMPLS=1): it proves that an isolated sweep records the
// case as `error`, naming the signal, and runs every other case.
#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "bitcheck/op.h"
#include "bitcheck/test_impls.h"

namespace bitcheck {
namespace {

class CrashingCpu : public Impl {
 public:
  std::string name() const override { return "test-crash"; }
  std::string backend() const override { return "cpu"; }
  bool claims_invariance() const override { return true; }
  std::string description() const override {
    return "test only (BITCHECK_TEST_IMPLS=1): raises SIGSEGV in run(), to prove fault isolation";
  }
  bool supports(Pass pass) const override { return pass == Pass::forward; }
  void run(Batch&) override {
    // A deliberate crash leaves no core file, and no handler (a sanitizer's) turns it into an exit.
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
    throw std::logic_error("SIGSEGV did not end the process");
  }
};

}  // namespace

bool test_impls_enabled() {
  const char* value = std::getenv("BITCHECK_TEST_IMPLS");
  return value && std::string(value) == "1";
}

void register_test_impls_cpu(Registry& registry) {
  if (!test_impls_enabled()) return;
  registry.add_impl("matmul", std::make_unique<CrashingCpu>());
}

}  // namespace bitcheck
