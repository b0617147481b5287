// Inputs found by fuzzing the loaders (scripts/fuzz.sh): each must be BadInput with a located
// message, never another exception (which the CLI would report as an internal error, exit 3).
#include <catch2/catch.hpp>

#include "bitcheck/error.h"
#include "bitcheck/json_input.h"

TEST_CASE("a number beyond double range is BadInput, not an escaping exception", "[json][fuzz]") {
  // libFuzzer on the contract loader: nlohmann throws out_of_range (406), not parse_error.
  try {
    bitcheck::parse_json_text(R"({"schema_version": 1e705})", "c.json");
    FAIL("accepted a number that overflows a double");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == "c.json");
    CHECK(error.json_path() == "$");
    CHECK(error.expected().find("number overflow") != std::string::npos);
  }
}
