// all_reduce: register_all_reduce(), its one line in kernels/manifest.cpp. Its definition and
// impls are the collectives' (common/collective.h).
#pragma once
#include "common/registration.h"

namespace bitcheck {
void register_all_reduce(Registry& registry, OpPart part);
}  // namespace bitcheck
