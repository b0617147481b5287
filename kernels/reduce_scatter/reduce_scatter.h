// reduce_scatter: register_reduce_scatter(), its one line in kernels/manifest.cpp. Its definition
// and impls are the collectives' (common/collective.h).
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_reduce_scatter(Registry& registry, OpPart part);
}  // namespace bitcheck
