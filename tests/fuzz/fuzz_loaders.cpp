// libFuzzer target for the input loaders: arbitrary bytes as a sweep spec
// (BITCHECK_FUZZ_TARGET=spec) or a contract (=contract). BadInput is the expected answer to bad
// bytes; anything else that escapes — a crash, a sanitizer report, another exception — is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "manifest.h"
#include "spec/contract.h"
#include "spec/spec.h"

namespace {

struct World {
  bitcheck::Registry registry;
  bitcheck::Contract contract;
  World() {
    bitcheck::register_all(registry);
    contract = bitcheck::load_embedded_contract(registry);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    nlohmann::json document = bitcheck::parse_json_text(text, "fuzz.json");
    if (BITCHECK_FUZZ_CONTRACT) {
      bitcheck::parse_contract(document, "fuzz.json", world.registry);
    } else {
      bitcheck::SweepSpec spec =
          bitcheck::parse_sweep_spec(document, "fuzz.json", world.registry, world.contract);
      bitcheck::SweepOverrides overrides;
      auto cases = bitcheck::expand_cases(spec, world.registry, overrides);
      (void)cases;
    }
  } catch (const bitcheck::BadInput&) {
    // The loader refused the input with a located message: the intended behaviour.
  }
  return 0;
}
