// CPU impls of add_rmsnorm: rmsnorm's CPU arithmetic on h = dtype(x + residual). `cpu-fixed-order`
// sums each row's squares of h in index order and reduces dweight over tokens in token order into
// the fp32 accumulator. The controls split a row's sum of squares in two when the batch is small
// (a row split across blocks when rows are few), or size the dweight tree by the padded slot count.
#include "add_rmsnorm/add_rmsnorm.h"
#include "rmsnorm/rmsnorm.h"

namespace bitcheck {

void register_add_rmsnorm_cpu(Registry& registry) {
  register_rmsnorm_cpu_impls(registry, "add_rmsnorm", RmsnormInput::x_plus_residual);
}

}  // namespace bitcheck
