// rmsnorm: register_rmsnorm(), its one line in kernels/manifest.cpp, its parts, and its impls as an
// op built on it runs them (the same arithmetic with the residual added first).
#pragma once
#include <string>

#include "common/registration.h"

namespace bitcheck {
void register_rmsnorm(Registry& registry, OpPart part);
void register_rmsnorm_op(Registry& registry);    // rmsnorm.cpp: the OpDef
void register_rmsnorm_cpu(Registry& registry);   // rmsnorm_cpu.cpp
void register_rmsnorm_cuda(Registry& registry);  // rmsnorm_cuda.cpp (CUDA build)

// The row an RMSNorm impl normalizes: x (rmsnorm), or h = dtype(x + residual), which forward also
// writes out and backward adds dh to (the fused residual add).
enum class RmsnormInput { x, x_plus_residual };

// What a CPU impl's run() computes (rmsnorm_cpu.cpp): the fixed order, a row's sum of squares
// split in two when rows are few, or dweight reduced by a tree sized by the slot count.
enum class RmsnormCpuVariant { fixed_order, split_row_small_batch, dweight_tree_by_tokens };
// Registers the CPU impls of `op` on the row `input` (rmsnorm_cpu.cpp): `cpu-fixed-order` and the
// `cpu-split-row-small-batch` and `cpu-dweight-tree-by-tokens` controls.
void register_rmsnorm_cpu_impls(Registry& registry, const std::string& op, RmsnormInput input);

// Registers the CUDA impls of `op` on the row `input` (rmsnorm_cuda.cpp, CUDA build):
// `fixed-order` and the `block-size-by-tokens` control, one identity for both norms (the kernels
// take the residual).
void register_rmsnorm_cuda_impls(Registry& registry, const std::string& op, RmsnormInput input);
}  // namespace bitcheck
