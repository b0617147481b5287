// Strict JSON input: inputs found by fuzzing the loaders (scripts/fuzz.sh) and ambiguous documents
// must be BadInput with a located message, never another exception (exit 3) or a silent reading.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/json_input.h"

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

namespace {
std::string duplicate_key_path(const std::string& text) {
  try {
    bitcheck::parse_json_text(text, "d.json");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == "d.json");
    CHECK(error.expected().find("appears twice") != std::string::npos);
    return error.json_path();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("an object naming a key twice is refused at the key's path, not read last-wins",
          "[json]") {
  CHECK(duplicate_key_path(R"({"a": 1, "a": 2})") == "$.a");
  CHECK(duplicate_key_path(
            R"({"ops": {"x": {"n": 1}, "y": {"n": 1, "m": [1, {"k": 0, "k": 0}]}}})") ==
        "$.ops.y.m[1].k");
  CHECK(duplicate_key_path(R"([[1, 2], {"b": {}}, {"c": 1, "c": {}}])") == "$[2].c");
  CHECK(duplicate_key_path(R"({"s": [{"N": 8}, {"N": 8, "K": 1, "N": 9}]})") == "$.s[1].N");
}

TEST_CASE("the same key in different objects is no duplicate", "[json]") {
  const nlohmann::json parsed = bitcheck::parse_json_text(
      R"({"a": {"n": 1}, "b": {"n": 2}, "c": [{"n": 3}, {"n": 4}]})", "ok.json");
  CHECK(parsed["b"]["n"] == 2);
  CHECK(parsed["c"][1]["n"] == 4);
}
