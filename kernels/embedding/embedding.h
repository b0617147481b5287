// embedding: register_embedding(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_embedding(Registry& registry, OpPart part);
void register_embedding_op(Registry& registry);       // embedding.cpp: the OpDef
void register_embedding_cpu(Registry& registry);      // embedding_cpu.cpp
void register_embedding_tp_cpu(Registry& registry);   // embedding_tp_cpu.cpp: simulated ranks
void register_embedding_cuda(Registry& registry);     // embedding_cuda.cpp (CUDA build)
void register_embedding_tp_cuda(Registry& registry);  // embedding_tp_cuda.cpp (CUDA build): ranks

// embedding.cpp: the id at `slot` of the batch input "ids", checked against V (throws naming the
// id, the slot and the range).
std::int32_t checked_token_id(const Batch& batch, std::int64_t slot);

// embedding_cpu.cpp: dtable[id] += dout of the batch's tokens whose ids are in [first_id, last_id),
// stably sorted by id (token order inside an id), in fp32 from the accumulator: the fixed-order
// backward, or one rank's share of it.
void embedding_table_grad_in_id_order(const Batch& batch, std::int64_t first_id,
                                      std::int64_t last_id, Tensor& dtable);

// embedding_cuda.cpp (CUDA build): the same on the device, into `dtable` ([last_id - first_id, H]
// fp32, row id - first_id) from `dout` ([slots, H] in the case dtype, on the device).
void embedding_table_grad_on_device(const Batch& batch, std::int64_t first_id, std::int64_t last_id,
                                    const void* dout, float* dtable);
}  // namespace bitcheck
