// environment_meta() for the cuBLASLt tuner (algos.cpp), which holds no Registry: the environment
// of the registry that register_all builds. Linked with the tuner, not with the harness library.
#include "bitcheck/op.h"
#include "bitcheck/sweep.h"

namespace bitcheck {

nlohmann::json environment_meta() {
  Registry registry;
  register_all(registry);
  return environment_meta(registry);
}

}  // namespace bitcheck
