// CUDA impls of add_rmsnorm: rmsnorm's adapter with the fused residual add (`fixed-order` and the
// `block-size-by-tokens` control; rmsnorm/rmsnorm_cuda.cpp says what each does).
#include "add_rmsnorm/add_rmsnorm.h"
#include "rmsnorm/rmsnorm.h"

namespace bitcheck {

void register_add_rmsnorm_cuda(Registry& registry) {
  register_rmsnorm_cuda_impls(registry, "add_rmsnorm", RmsnormInput::x_plus_residual);
}

}  // namespace bitcheck
