// The fixed-order TP GEMMs' chunk tree (the TP matmuls' split sum, lm_head's vocabulary-parallel
// dh): a rank's chunk products by the fixed-order GEMM and the ranks' tree finished across the
// ranks (common/rank_sum_cuda.h), by whichever route the message size and the host allow; every
// route gives the same bits. Plain C++ (CUDA build only).
#pragma once
#include <cstdint>
#include <string>

#include "common/rank_sum_cuda.h"
#include "common/runtime.h"
#include "matmul/gemm_dtype.h"

namespace bitcheck::cuda_tp {

// The fp32 products of `chunks` consecutive column blocks of `width` columns each: leaf c =
// a[:, c-th block] · b[:, c-th block]ᵀ, [m, j] fp32 at leaves + c * m * j (one launch on the wgmma
// path when width is a multiple of 64). a [m, chunks * width] and b [j, chunks * width] on the
// device in `dtype`.
void chunk_products(cuda::GemmDType dtype, const void* a, const void* b, float* leaves,
                    std::int64_t m, std::int64_t j, std::int64_t width, int chunks);

// This rank's per_rank chunk products (as chunk_products) and the chunk tree finished across the
// ranks into `result` (m x j of `out_dtype`); returns the transport. From peer_fused_from_bytes of
// fp32 subtree over peer memory the GEMM adds the rank's chunks itself and stores the subtree
// straight into the ranks' staging, and the tree is finished from there (peer-fused; where the
// wgmma path takes the shape: width a multiple of 64); otherwise the products go to `leaves`
// (allocated here when too small) and finish_chunk_tree finishes them. Every route gives the same
// bits. Every rank of the group calls it at the same call.
std::string chunk_tree_product(bool early_rounding, cuda::GemmDType dtype, const void* a,
                               const void* b, std::int64_t m, std::int64_t j, std::int64_t width,
                               int per_rank, int tp, cuda::DeviceDType out_dtype, void* result,
                               bool over_nccl, cuda::DeviceBuffer& leaves);

}  // namespace bitcheck::cuda_tp
