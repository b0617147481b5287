// Catch2 (v2) main for every bitcheck test binary.
#define CATCH_CONFIG_MAIN
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

// ctest learns the tests from their names (catch_discover_tests) and passes each name back as the
// filter. CMake reads the list of names as a CMake list, where an unmatched '[' opens a bracket
// argument that swallows the ';' separators: every following test then became part of one
// "test" whose filter matched nothing, and ctest counted "No tests ran" as passed. Names stay
// plain so every test really runs under ctest.
TEST_CASE("every test name survives ctest discovery", "[meta]") {
  for (const auto& test : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    const std::string& name = test.getTestCaseInfo().name;
    INFO("test name: " << name);
    CHECK(std::count(name.begin(), name.end(), '[') == std::count(name.begin(), name.end(), ']'));
    CHECK(name.find(';') == std::string::npos);
    CHECK(name.find('\\') == std::string::npos);
    CHECK_FALSE(name.empty());
    CHECK(name.front() != '-');  // read as an option, not a filter
  }
}
