// The prefill launches of the warp-specialized wgmma attention forward (sm_90a; bf16/fp16, head
// dim 128; the kernel in attention_forward_ws.cuh): persistent CTAs, one per SM, of two consumer
// warpgroups that take (tile, head) work items in the order of attention_prefill_order.
// AttentionForwardLaunch (attention_plan.cu) plans the launch and records its path.
//
// Kernels (forward_ws_kernel<T, 128, Consumers, ChunkBlocks, Stages>):
//   <T, 128, 2, 32, 4>  prefill in 2048-key chunks: forward.wgmma.prefill (ping-pong),
//                       forward.wgmma.prefill.cooperative, forward.wgmma.prefill.l2-sections
//   <T, 128, 2, 0, 4>   test only, no chunks: forward.wgmma.unchunked
//
// Why a row's bits do not depend on the batch: a row reduces its keys in 64-key blocks from
// position 0 upward, in 2048-key chunks aligned to position 0 merged in chunk order, with the
// per-row arithmetic every tensor-core forward shares (attention_forward_ws.cuh says it in full);
// which work items a persistent CTA takes, in what order, and the consumers' ping-pong are
// scheduling.
#include <cstdint>

#include "attention_forward_ws.cuh"
#include "attention_launchers.h"

namespace bitcheck::cuda {

void launch_forward_ws_prefill(const AttentionWsLaunch& launch, CUstream_st* stream) {
  const WsTensorMaps maps = ws_tensor_maps(launch);
  dispatch_ws(launch.dtype, [&](auto tag) {
    using T = decltype(tag);
    const WsParams<T> params = ws_params<T>(launch);
    const std::int64_t ctas = static_cast<std::int64_t>(launch.tile_count) * params.units;
    if (launch.chunked) {
      launch_ws<T, ws_dim, 2, chunk_blocks, 4>(maps.q, maps.k, maps.v, params, ctas, stream);
    } else {
      launch_ws<T, ws_dim, 2, 0, 4>(maps.q, maps.k, maps.v, params, ctas, stream);
    }
  });
}

}  // namespace bitcheck::cuda
