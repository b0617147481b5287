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
  explicit FaultingCuda(Fault fault) : fault_(fault) {}
  std::string name() const override {
    switch (fault_) {
      case Fault::trap:
        return "test-trap";
      case Fault::illegal_address:
        return "test-illegal-address";
      case Fault::out_of_memory:
        return "test-oom";
    }
    return "";
  }
  std::string backend() const override { return "cuda"; }
  bool claims_invariance() const override { return true; }
  std::string description() const override {
    switch (fault_) {
      case Fault::trap:
        return "test only (BITCHECK_TEST_IMPLS=1): a kernel executes __trap() (sticky error)";
      case Fault::illegal_address:
        return "test only (BITCHECK_TEST_IMPLS=1): a kernel stores through an unmapped address "
               "(sticky error)";
      case Fault::out_of_memory:
        return "test only (BITCHECK_TEST_IMPLS=1): cudaMalloc of 1 PiB (out of memory, not sticky)";
    }
    return "";
  }
  bool supports(Pass pass) const override { return pass == Pass::forward; }
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
  for (Fault fault : {Fault::trap, Fault::illegal_address, Fault::out_of_memory}) {
    registry.add_impl("matmul", std::make_unique<FaultingCuda>(fault));
  }
}

}  // namespace bitcheck
