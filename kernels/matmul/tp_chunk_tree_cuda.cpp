// The fixed-order TP GEMMs' chunk tree (matmul/tp_chunk_tree.h).
#include <optional>

#include "matmul/fixed_order_gemm.h"
#include "matmul/tp_chunk_tree.h"

namespace bitcheck::cuda_tp {

void chunk_products(cuda::GemmDType dtype, const void* a, const void* b, float* leaves,
                    std::int64_t m, std::int64_t j, std::int64_t width, int chunks) {
  const std::int64_t stride = width * chunks;
  cuda::fixed_order_gemm_fp32_out(dtype, a, stride, b, stride, leaves, m, j, width, nullptr,
                                  chunks);
}

std::string chunk_tree_product(bool early_rounding, cuda::GemmDType dtype, const void* a,
                               const void* b, std::int64_t m, std::int64_t j, std::int64_t width,
                               int per_rank, int tp, cuda::DeviceDType out_dtype, void* result,
                               bool over_nccl, cuda::DeviceBuffer& leaves) {
  const std::size_t count = static_cast<std::size_t>(m * j);
  if (!early_rounding && !over_nccl) {
    if (const std::optional<PeerSubtreeParts> parts = peer_subtree_parts(count, tp)) {
      const std::int64_t stride = width * per_rank;
      if (cuda::fixed_order_gemm_fp32_subtree(dtype, a, stride, b, stride, m, j, width, per_rank,
                                              parts->parts, parts->part_elements, nullptr)) {
        finish_peer_subtree(count, out_dtype, tp, result);
        return "peer-fused";
      }
    }
  }
  const std::size_t leaf_bytes = count * sizeof(float) * static_cast<std::size_t>(per_rank) + 16;
  if (leaves.bytes() < leaf_bytes) leaves = cuda::DeviceBuffer(leaf_bytes);
  chunk_products(dtype, a, b, leaves.as<float>(), m, j, width, per_rank);
  return finish_chunk_tree(early_rounding, leaves.as<float>(), count, out_dtype, tp, result,
                           over_nccl);
}

}  // namespace bitcheck::cuda_tp
