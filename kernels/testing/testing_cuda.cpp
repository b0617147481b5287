// Test-only CUDA impls of matmul that fail on purpose (BITCHECK_TEST_IMPLS=1): a kernel that traps,
// a kernel that stores through an illegal address (both sticky: the context is poisoned) and an
// impossible cudaMalloc (out of memory, not sticky). A sweep must record each of their cases as
// `error` with the CUDA error text and still pass the normal CUDA cases that follow.
#include <cstddef>
#include <memory>
#include <stdexcept>

#include "common/runtime.h"
#include "core/op.h"
#include "testing/fault_kernels.h"
#include "testing/testing.h"

namespace bitcheck {
namespace {

enum class Fault { trap, illegal_address, out_of_memory };

class FaultingCuda : public Impl {
 public:
  FaultingCuda(ImplInfo info, Fault fault) : Impl(std::move(info)), fault_(fault) {}
  void run(Batch&) override {
    switch (fault_) {
      case Fault::trap:
        cuda::launch_trap_kernel();
        break;
      case Fault::illegal_address:
        cuda::launch_illegal_address_kernel();
        break;
      case Fault::out_of_memory: {
        cuda::DeviceBuffer impossible(std::size_t(1) << 50);
        break;
      }
    }
    throw std::logic_error("impl " + name() + " did not fail");
  }

 private:
  Fault fault_;
};

}  // namespace

void register_test_impls_cuda(Registry& registry) {
  if (!test_impls_enabled()) return;
  auto test_only = [](const std::string& name, const std::string& what) {
    return ImplInfo::invariant(name, "cuda", "test only (BITCHECK_TEST_IMPLS=1): " + what)
        .only_passes({Pass::forward});
  };
  register_impls<FaultingCuda, Fault>(
      registry, "matmul",
      {{test_only("test-trap", "a kernel executes __trap() (sticky error)"), Fault::trap},
       {test_only("test-illegal-address",
                  "a kernel stores through an unmapped address (sticky error)"),
        Fault::illegal_address},
       {test_only("test-oom", "cudaMalloc of 1 PiB (out of memory, not sticky)"),
        Fault::out_of_memory}});
}

}  // namespace bitcheck
