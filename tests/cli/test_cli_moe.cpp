// `bitcheck sweep --spec sweeps/moe.json` on the CPU backend: cpu-fixed-order passes every layout
// of every case, uniform and skewed, each control drifts, the batches cross the split-K control's
// switch point, the decoder stack with moe MLPs holds and drifts with a control swapped in; and a
// moe shape the op cannot mean, alone or as a chain's MLP, is bad input naming the dim and what
// was expected (exit 2).
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli/cli_support.h"

using nlohmann::json;

TEST_CASE("sweeps/moe.json on the CPU: the fixed order passes, every control drifts",
          "[cli][moe]") {
  TempDir dir;
  Run run =
      run_bitcheck(dir, "sweep --spec " + quote(source_dir + "/sweeps/moe.json") +
                            " --backend cpu --dtype bf16 --no-progress --out " + quote(dir.path()));
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  const json report = json::parse(read_file(dir / "report.json"));
  std::map<std::string, std::set<std::string>> verdicts;  // impl/pass -> verdicts
  std::set<std::int64_t> skewed_batches;
  std::set<std::string> split_k_paths;
  std::map<std::string, std::set<std::string>> chain_verdicts;  // chain impl -> verdicts
  for (const auto& c : report["results"]) {
    const std::string impl = c["impl"], pass = c["pass"];
    if (c["op"] == "chain") {
      chain_verdicts[impl].insert(c["verdict"].get<std::string>());
      continue;
    }
    verdicts[impl + "/" + pass].insert(c["verdict"].get<std::string>());
    if (impl == "cpu-fixed-order") {
      INFO(c["id"].get<std::string>());
      CHECK(c["layouts_run"].size() == 7);
    }
    if (c["dims"].contains("hot_experts")) skewed_batches.insert(c["rows"].get<std::int64_t>());
    if (impl == "cpu-split-k-by-load") {
      for (const auto& [layout, paths] : c["paths"].items())
        for (const auto& path : paths) split_k_paths.insert(path.get<std::string>());
    }
  }
  for (const char* pass : {"forward", "backward"}) {
    CHECK(verdicts[std::string("cpu-fixed-order/") + pass] == std::set<std::string>{"pass"});
    CHECK(verdicts[std::string("cpu-split-k-by-load/") + pass].count("drift") == 1);
    CHECK(verdicts[std::string("cpu-arrival-order-combine/") + pass].count("drift") == 1);
  }
  CHECK(verdicts["cpu-arrival-order-dw/backward"].count("drift") == 1);
  CHECK(verdicts["cpu-arrival-order-dw/forward"] == std::set<std::string>{"pass"});
  // "switch-points": both sides of the split-K control's load threshold (4 tokens on an expert).
  CHECK(skewed_batches.count(3) == 1);
  CHECK(skewed_batches.count(4) == 1);
  CHECK(split_k_paths == std::set<std::string>{"expert.split-k", "expert.whole"});
  // The decoder stack whose MLP is an moe layer: invariant, and each moe control swapped in drifts.
  CHECK(chain_verdicts["cpu-fixed-order"] == std::set<std::string>{"pass"});
  CHECK(chain_verdicts["cpu-fixed-order+moe=cpu-split-k-by-load"].count("drift") == 1);
  CHECK(chain_verdicts["cpu-fixed-order+moe=cpu-arrival-order-combine"].count("drift") == 1);
  CHECK(report["summary"]["harness_failures"].empty());
}

namespace {

// A shape the op cannot mean, in a spec entry of `op`: what a user who wrote it reads.
struct Bad {
  const char* shape;
  const char* path;      // under $.ops.<op>.
  const char* expected;  // what the message says was expected
};

void check_bad_input(const std::string& op, const Bad& bad) {
  TempDir dir;
  const std::string spec = dir / "spec.json";
  std::ofstream(spec) << R"({"schema_version": 1, "ops": {")" << op << R"(": {"shapes": [)"
                      << bad.shape << "]}}}";
  Run run = run_bitcheck(dir, "sweep --spec " + quote(spec) + " --backend cpu --no-progress " +
                                  "--out " + quote(dir / "out"));
  INFO(bad.shape << "\nstderr: " << run.err);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains(spec));
  CHECK_THAT(run.err, Catch::Contains("$.ops." + op + "." + bad.path));
  CHECK_THAT(run.err, Catch::Contains(bad.expected));
  CHECK_FALSE(std::filesystem::exists(dir / "out/report.json"));
}

}  // namespace

// Every bad dim and its message: tests/unit/test_moe.cpp; here the command's end of it.
TEST_CASE("a moe shape the op cannot mean is bad input naming the dim", "[cli][moe][bad-input]") {
  for (const Bad& bad :
       {Bad{R"({"H": 64, "I": 32, "E": 8, "topk": 9})", "shapes[0].topk", "at most E (8)"},
        Bad{R"({"H": 64, "I": 36, "E": 8, "topk": 2})", "shapes[0].I", "a multiple of 8"},
        Bad{R"({"H": 64, "I": 32, "E": 12, "topk": 2})", "shapes[0].E", "a multiple of 8"},
        Bad{R"({"H": 64, "I": 32, "E": 8, "topk": 2, "hot_experts": 3})", "shapes[0].hot_experts",
            "at most topk (2) hot experts"}})
    check_bad_input("moe", bad);
}

TEST_CASE("a chain whose moe MLP the op cannot mean is bad input naming the dim",
          "[cli][moe][chain][bad-input]") {
  const std::string dense =
      R"("layers": 1, "H": 64, "heads": 4, "kv_heads": 2, "D": 16, "I": 32, "V": 32, "L": 40)";
  const std::string more_than_e = "{" + dense + R"(, "E": 8, "topk": 9})";
  const std::string without_e = "{" + dense + R"(, "topk": 2})";
  const std::string untiled = "{" + dense + R"(, "E": 12, "topk": 2})";
  for (const Bad& bad : {Bad{more_than_e.c_str(), "shapes[0].topk", "at most E (8)"},
                         Bad{without_e.c_str(), "shapes[0].topk", "no topk without E"},
                         Bad{untiled.c_str(), "shapes[0].E", "a multiple of 8"}})
    check_bad_input("chain", bad);
}
