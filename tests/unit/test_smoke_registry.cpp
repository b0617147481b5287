// The manifest registers every op with at least one invariant CPU impl and one CPU control.
#include <catch2/catch.hpp>

#include "core/op.h"
#include "manifest.h"

TEST_CASE("every op has an invariant CPU impl and a CPU control", "[registry]") {
  bitcheck::Registry registry;
  bitcheck::register_all(registry);
  REQUIRE_FALSE(registry.ops().empty());
  for (const bitcheck::OpDef* op : registry.ops()) {
    bool invariant = false, control = false;
    for (bitcheck::Impl* impl : registry.impls(op->name)) {
      if (impl->backend() != "cpu") continue;
      invariant = invariant || impl->claims_invariance();
      control = control || !impl->claims_invariance();
    }
    INFO("op " << op->name);
    CHECK(invariant);
    CHECK(control);
  }
}
