// The CPU backend: fixed-order impls and the CPU controls, registered per op.
#pragma once
#include "bitcheck/op.h"

namespace bitcheck {
void register_matmul_cpu(Registry& registry);
void register_rmsnorm_cpu(Registry& registry);
}  // namespace bitcheck
