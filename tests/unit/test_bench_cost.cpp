// The cost-of-invariance table of `bitcheck bench`, from synthetic bench results: invariant impls
// over the library default at the same M, memory-bound ops over a copy of the same bytes; controls
// and failed measurements are not in it.
#include <catch2/catch.hpp>

#include "report/bench_cost.h"

using namespace bitcheck;

namespace {

nlohmann::json result(const std::string& op, const std::string& impl, bool invariant,
                      std::int64_t rows, double median_ms) {
  return {{"op", op},
          {"impl", impl},
          {"dtype", "bf16"},
          {"pass", "forward"},
          {"dims", {{"N", 4096}, {"K", 4096}}},
          {"rows", rows},
          {"claims_invariance", invariant},
          {"median_ms", median_ms}};
}

}  // namespace

TEST_CASE("cost of invariance: impl time over the library default per shape, geomean and worst M",
          "[bench]") {
  nlohmann::json results = nlohmann::json::array();
  for (auto [rows, heuristic_ms, pinned_ms] :
       {std::tuple<std::int64_t, double, double>{1, 0.01, 0.02},
        {64, 0.02, 0.02},
        {4096, 0.5, 0.4}}) {
    results.push_back(result("matmul", "cublaslt-heuristic", false, rows, heuristic_ms));
    nlohmann::json pinned = result("matmul", "cublaslt-pinned", true, rows, pinned_ms);
    pinned["ratio_to_baseline"] = heuristic_ms / pinned_ms;
    pinned["baseline"] = "cublaslt-heuristic";
    results.push_back(pinned);
  }
  nlohmann::json failed = result("matmul", "fixed-order", true, 1, 0);
  failed.erase("median_ms");
  failed["error"] = "device error";
  results.push_back(failed);
  nlohmann::json norm = result("rmsnorm", "fixed-order", true, 64, 0.01);
  norm["fraction_of_same_bytes_copy"] = 0.8;
  norm["fraction_of_copy_bandwidth"] = 0.5;
  results.push_back(norm);

  nlohmann::json cost = cost_of_invariance(results);
  REQUIRE(cost.size() == 2);  // the control and the failed measurement are not costs
  const auto& pinned = cost[0];
  CHECK(pinned["impl"] == "cublaslt-pinned");
  CHECK(pinned["versus"] == "cublaslt-heuristic");
  REQUIRE(pinned["per_rows"].size() == 3);
  CHECK(pinned["per_rows"][0]["cost"].get<double>() == Approx(2.0));
  CHECK(pinned["worst_cost"].get<double>() == Approx(2.0));
  CHECK(pinned["worst_rows"] == 1);
  CHECK(pinned["best_cost"].get<double>() == Approx(0.8));
  CHECK(pinned["geomean_cost"].get<double>() == Approx(std::cbrt(2.0 * 1.0 * 0.8)));
  CHECK(cost[1]["versus"] == "copy of the same bytes");
  CHECK(cost[1]["geomean_cost"].get<double>() == Approx(1.25));

  std::string markdown = render_cost_of_invariance_markdown(cost);
  CHECK(markdown.find(
            "| matmul | bf16 | forward | K=4096,N=4096 | cublaslt-pinned | cublaslt-heuristic | "
            "1.17x | 2.00x (1) | 0.80x | 1:2.00 64:1.00 4096:0.80 |") != std::string::npos);
  CHECK(markdown.find("cublaslt-heuristic | cublaslt-heuristic") == std::string::npos);
}
