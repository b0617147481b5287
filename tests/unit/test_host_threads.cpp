// Host work on threads: every item once, the lowest item's exception rethrown, spans cut into
// parts of whole units that cover them exactly.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/host_threads.h"

using namespace bitcheck;

TEST_CASE("run_on_threads: each item once, the lowest failing item's exception", "[threads]") {
  std::vector<std::atomic<int>> seen(1000);
  run_on_threads(seen.size(), 4, [&](std::size_t i) { ++seen[i]; });
  for (const auto& count : seen) CHECK(count == 1);
  try {
    run_on_threads(100, 4, [](std::size_t i) {
      if (i == 70 || i == 30) throw std::runtime_error("item " + std::to_string(i));
    });
    FAIL("no exception");
  } catch (const std::runtime_error& error) {
    CHECK(std::string(error.what()) == "item 30");
  }
}

TEST_CASE("run_in_parts: parts of whole units covering the span once", "[threads]") {
  setenv("BITCHECK_HOST_THREADS", "3", 1);
  for (std::size_t total : {std::size_t{10}, std::size_t{4000} * 6 + 6}) {
    std::vector<std::atomic<int>> covered(total);
    std::atomic<int> calls{0};
    run_in_parts(total, 6, 1000, [&](std::size_t first, std::size_t last) {
      ++calls;
      CHECK(first % 6 == 0);
      for (std::size_t i = first; i < last; ++i) ++covered[i];
    });
    for (const auto& count : covered) CHECK(count == 1);
    CHECK(calls == (total < 2000 ? 1 : 3));
  }
  unsetenv("BITCHECK_HOST_THREADS");
}
