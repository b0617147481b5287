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

namespace {
std::string nested_arrays(std::int64_t depth) {
  return std::string(static_cast<std::size_t>(depth), '[') +
         std::string(static_cast<std::size_t>(depth), ']');
}
}  // namespace

TEST_CASE("nesting up to the limit parses, one level more is refused naming depth and place",
          "[json]") {
  CHECK(bitcheck::parse_json_text(nested_arrays(bitcheck::json_max_depth), "ok.json").is_array());
  const std::string too_deep = "{\"a\":\n " + nested_arrays(bitcheck::json_max_depth) + "}";
  try {
    bitcheck::parse_json_text(too_deep, "deep.json");
    FAIL("accepted a document nested deeper than the limit");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == "deep.json");
    CHECK(error.expected() ==
          "arrays and objects nested at most 64 levels deep, got 65 levels (level 65 opens at "
          "line 2, column 65)");
  }
}

TEST_CASE("brackets inside strings, escaped quotes included, are no nesting", "[json]") {
  const std::string brackets(1000, '[');
  const nlohmann::json parsed = bitcheck::parse_json_text(
      R"({"s": ")" + brackets + R"(\"[[", "t": [")" + brackets + R"("]})", "strings.json");
  CHECK(parsed["s"].get<std::string>().size() == 1003);
  CHECK(parsed["t"][0].get<std::string>() == brackets);
}

TEST_CASE("a 100,000-level document is refused, not parsed", "[json]") {
  CHECK_THROWS_WITH(bitcheck::parse_json_text(nested_arrays(100000), "deep.json"),
                    Catch::Contains("deep.json: $: expected") &&
                        Catch::Contains("got 100000 levels (level 65 opens at line 1, column 65)"));
}
