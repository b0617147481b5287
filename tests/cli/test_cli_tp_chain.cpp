// The chain at tp = P on the CPU backend's simulated ranks: the fixed-order chain gives its tp = 1
// bits at tp 2 and 4, forward and backward; the rank chain holds in the batch and differs across TP
// sizes (reported beside the verdict); the early-rounding control drifts at tp > 1, its first
// failing call named; a tp that does not divide the heads is bad input.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

const char* const tp_chain_spec = R"({"schema_version": 1,
  "defaults": {"dtypes": ["bf16"], "tp": [1, 2, 4], "batches": [3]},
  "ops": {"chain": {
    "impls": ["cpu-tp-fixed-order", "cpu-tp-rank-chain", "cpu-tp-early-rounding"],
    "layouts": ["seq_alone", "batch", "varlen_packed", "padded", "chunked_16", "decode"],
    "shapes": [{"layers": 1, "H": 32, "heads": 4, "kv_heads": 4, "D": 8, "I": 64, "V": 64,
                "L": 20}]}}})";

// The chain cases of a report by (impl, pass, tp).
std::map<std::tuple<std::string, std::string, int>, json> chain_cases(const json& report) {
  std::map<std::tuple<std::string, std::string, int>, json> cases;
  for (const auto& c : report["results"]) {
    cases[{c["impl"].get<std::string>(), c["pass"].get<std::string>(), c.value("tp", 1)}] = c;
  }
  return cases;
}

// Whether a list of differences (drift or cross_tp_drift) holds one against a layout at tp = 1.
bool against_tp1(const json& differences) {
  return std::any_of(differences.begin(), differences.end(), [](const json& d) {
    return d["reference_layout"].get<std::string>().find("/tp=1") != std::string::npos;
  });
}

}  // namespace

TEST_CASE(
    "the chain at tp 2 and 4: fixed-order gives its tp = 1 bits, the early-rounding control "
    "drifts first at o_proj",
    "[cli][tp][chain]") {
  TempDir dir;
  std::ofstream(dir / "spec.json") << tp_chain_spec;
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto cases = chain_cases(json::parse(read_file(dir / "out/report.json")));
  for (const std::string pass : {"forward", "backward"}) {
    for (int tp : {1, 2, 4}) {
      INFO(pass << " tp=" << tp);
      const json& fixed = cases.at({"cpu-tp-fixed-order", pass, tp});
      CHECK(fixed["verdict"] == "pass");
      CHECK(fixed.value("drift", json::array()).empty());
      CHECK(!fixed.contains("cross_tp_drift"));
      CHECK(cases.at({"cpu-tp-rank-chain", pass, tp})["verdict"] == "pass");
      if (tp == 1) continue;
      // The layouts at tp = P were compared with the rows alone at tp = 1.
      CHECK(fixed["layouts_run"][0] == "seq_alone/tp=1");
      // The rank chain's sums differ across TP sizes: reported, not a failure.
      CHECK(against_tp1(
          cases.at({"cpu-tp-rank-chain", pass, tp}).value("cross_tp_drift", json::array())));
      // The control drifts across TP sizes, first at the first row-parallel sum.
      const json& control = cases.at({"cpu-tp-early-rounding", pass, tp});
      CHECK(control["verdict"] == "drift");
      CHECK(against_tp1(control["drift"]));
      CHECK(control["chain"]["first_failing_forward"]["call"] == "l0.o_proj");
    }
  }
  // At tp = 1 no partial is rounded early: the control holds.
  CHECK(cases.at({"cpu-tp-early-rounding", "forward", 1})["verdict"] == "pass");
  CHECK(run.out.find("forward: first failing op l0.o_proj (matmul, layer 0) drift") !=
        std::string::npos);
}

TEST_CASE("a tp that does not divide the chain's KV heads is bad input naming the file and field",
          "[cli][tp][chain]") {
  TempDir dir;
  std::ofstream(dir / "spec.json") << R"({"schema_version": 1,
    "ops": {"chain": {"impls": ["cpu-tp-fixed-order"], "tp": [1, 4],
      "shapes": [{"layers": 1, "H": 32, "heads": 4, "kv_heads": 2, "D": 8, "I": 64, "V": 64,
                  "L": 20}]}}})";
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("spec.json") != std::string::npos);
  CHECK(run.err.find("$.ops.chain.tp") != std::string::npos);
  CHECK(run.err.find("tp=4 does not divide kv_heads=2") != std::string::npos);
}
