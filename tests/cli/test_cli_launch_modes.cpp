// The launch-mode layouts through the binary on the CPU backend: verify_K steps of attention and
// the chain pass for the fixed-order impls and show a KV-block control's drift; the graph layout is
// skipped with its reason in the report.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

std::map<std::string, json> sweep_cases(const TempDir& dir, const std::string& spec) {
  std::ofstream(dir / "spec.json") << spec;
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const json report = json::parse(read_file(dir / "out/report.json"));
  std::map<std::string, json> cases;
  for (const auto& c : report["results"]) cases[c["id"].get<std::string>()] = c;
  return cases;
}

bool drifts_in(const json& c, const std::string& layout) {
  for (const auto& drift : c["drift"])
    if (drift["layout"] == layout) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "verify_K layouts run for attention and the chain, and the graph layout is skipped "
    "on the CPU backend with its reason",
    "[cli][layouts]") {
  TempDir dir;
  const auto cases = sweep_cases(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "batches": [3]},
    "ops": {
      "attention": {"impls": ["cpu-fixed-order", "cpu-kv-block-by-length"],
                    "layouts": ["seq_alone", "decode", "verify_3", "verify_7", "graph"],
                    "shapes": [{"H": 4, "KVH": 2, "D": 16, "L": 70}]},
      "chain": {"impls": ["cpu-fixed-order"],
                "layouts": ["seq_alone", "batch", "verify_3", "verify_7"],
                "shapes": [{"layers": 1, "H": 64, "heads": 4, "kv_heads": 2, "D": 16, "I": 128,
                            "V": 256, "L": 40}]},
      "rmsnorm": {"impls": ["cpu-fixed-order"], "layouts": ["alone", "batch", "graph"],
                  "shapes": [{"H": 64}]}}})");
  const std::string attention_dims = "D=16,H=4,KVH=2,L=70";
  const json& fixed =
      cases.at("attention/cpu-fixed-order/bf16/forward/" + attention_dims + "/M=3/seed=1");
  CHECK(fixed["verdict"] == "pass");
  CHECK(fixed["layouts_run"] == json({"seq_alone", "decode", "verify_3", "verify_7"}));
  CHECK(fixed["skipped_layouts"]["graph"] ==
        "the cpu backend has no device, so no CUDA graph to capture into");
  const json& control =
      cases.at("attention/cpu-kv-block-by-length/bf16/forward/" + attention_dims + "/M=3/seed=1");
  CHECK(control["verdict"] == "drift");
  CHECK((drifts_in(control, "verify_3") || drifts_in(control, "verify_7")));
  const json& chain = cases.at(
      "chain/cpu-fixed-order/bf16/forward/D=16,H=64,I=128,L=40,V=256,heads=4,kv_heads=2,layers=1/"
      "M=3/seed=1");
  CHECK(chain["verdict"] == "pass");
  CHECK(chain["layouts_run"] == json({"seq_alone", "batch", "verify_3", "verify_7"}));
  const json& rmsnorm = cases.at("rmsnorm/cpu-fixed-order/bf16/forward/H=64/M=3/seed=1");
  CHECK(rmsnorm["verdict"] == "pass");
  CHECK(rmsnorm["layouts_run"] == json({"alone", "batch"}));
  CHECK(rmsnorm["skipped_layouts"].contains("graph"));
}
