// embedding: register_embedding(), its one line in kernels/manifest.cpp, and its parts.
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_embedding(Registry& registry, OpPart part);
void register_embedding_op(Registry& registry);    // embedding.cpp: the OpDef
void register_embedding_cpu(Registry& registry);   // embedding_cpu.cpp
void register_embedding_cuda(Registry& registry);  // embedding_cuda.cpp (CUDA build)
}  // namespace bitcheck
