// Kernel provenance on the device (CUPTI): every layout of our impls and of cuBLASLt's records the
// kernels it launched, the paths our impls declare agree with the kernels that ran, and the
// heuristic's kernel sequence is its path.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "unit/case_support.h"

using namespace bitcheck;

namespace {

// The registry with provenance on for the test's lifetime.
struct ProvenanceWorld {
  case_support::World world;
  ProvenanceWorld() {
    RunSettings settings;
    settings.provenance = true;
    start_run(world.registry, settings);
  }
  ~ProvenanceWorld() { start_run(world.registry, RunSettings{}); }
  CaseResult run(const CaseSpec& spec) { return case_support::run(spec, world.registry); }
};

// A kernel's own name: "ns::(anonymous namespace)::k<T, 4>" -> "k".
std::string base_name(const std::string& name) {
  const std::string function = name.substr(0, name.find('<'));
  const std::size_t scope = function.rfind("::");
  return scope == std::string::npos ? function : function.substr(scope + 2);
}

// Declared paths (those starting with `path`) and the launches that mean one of them ran.
struct PathRule {
  std::string path;
  std::function<bool(const KernelLaunch&)> launched;
};

// In every layout of the case, each rule's path was recorded exactly when one of its kernels ran.
void expect_paths_agree_with_kernels(const CaseResult& result, const std::vector<PathRule>& rules) {
  REQUIRE_FALSE(result.kernels.empty());
  for (const auto& [layout, uses] : result.kernels) {
    const std::vector<std::string>& paths = result.paths.at(layout);
    for (const PathRule& rule : rules) {
      const bool recorded = std::any_of(paths.begin(), paths.end(), [&](const std::string& path) {
        return path.rfind(rule.path, 0) == 0;
      });
      const bool ran = std::any_of(uses.begin(), uses.end(),
                                   [&](const KernelUse& use) { return rule.launched(use.launch); });
      std::string kernels;
      for (const KernelUse& use : uses) kernels += "\n  " + launch_text(use.launch);
      INFO(result.spec.id() << " layout " << layout << ": path " << rule.path << " recorded "
                            << recorded << ", kernels:" << kernels);
      CHECK(recorded == ran);
    }
  }
}

CaseSpec rmsnorm_case(const std::string& impl, std::int64_t width, std::int64_t rows) {
  return case_support::make_case("rmsnorm", impl, DType::bf16, Pass::forward, {{"H", width}}, rows,
                                 3);
}

const std::vector<PathRule> rmsnorm_forward_rules = {
    {"forward.rows.one-warp",
     [](const KernelLaunch& k) {
       return base_name(k.name) == "rmsnorm_forward_rows_kernel" && k.block[0] == 32;
     }},
    {"forward.rows.multi-warp",
     [](const KernelLaunch& k) {
       return base_name(k.name) == "rmsnorm_forward_rows_kernel" && k.block[0] > 32;
     }},
    {"forward.block-per-row",
     [](const KernelLaunch& k) { return base_name(k.name) == "rmsnorm_forward_kernel"; }},
};

}  // namespace

TEST_CASE("provenance: rmsnorm's declared row paths are the kernels that ran",
          "[gpu][provenance]") {
  ProvenanceWorld world;
  // One-warp rows, multi-warp rows, and a width past the row kernels (block per row).
  for (std::int64_t width : {256, 4096, 65536}) {
    for (std::int64_t rows : {1, 33}) {
      const CaseResult result = world.run(rmsnorm_case("fixed-order", width, rows));
      INFO(case_support::describe(result));
      REQUIRE(result.verdict != Verdict::error);
      expect_paths_agree_with_kernels(result, rmsnorm_forward_rules);
    }
  }
  // The control picks its block size from the number of tokens: block-per-row kernels.
  const CaseResult control = world.run(rmsnorm_case("block-size-by-tokens", 1024, 300));
  expect_paths_agree_with_kernels(control, rmsnorm_forward_rules);
}

TEST_CASE("provenance: the fixed-order GEMM's tile paths are the wgmma kernels that ran",
          "[gpu][provenance]") {
  ProvenanceWorld world;
  // wgmma_gemm_kernel<T, Consumers, Extent, WAsA>: the W-as-A tiles are WAsA = true.
  const auto wgmma = [](const KernelLaunch& k, const char* w_as_a) {
    const std::string suffix = std::string(", ") + w_as_a + ">";
    return base_name(k.name) == "wgmma_gemm_kernel" && k.name.size() > suffix.size() &&
           k.name.compare(k.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const std::vector<PathRule> rules = {
      {"tile.W-as-A.", [&](const KernelLaunch& k) { return wgmma(k, "true"); }},
      {"tile.X-as-A.", [&](const KernelLaunch& k) { return wgmma(k, "false"); }},
  };
  for (std::int64_t rows : {1, 33, 300, 2048}) {
    CaseSpec spec = case_support::make_case("matmul", "fixed-order", DType::bf16, Pass::forward,
                                            {{"N", 512}, {"K", 256}}, rows, 1);
    const CaseResult result = world.run(spec);
    INFO(case_support::describe(result));
    REQUIRE(result.verdict == Verdict::pass);
    expect_paths_agree_with_kernels(result, rules);
  }
}

TEST_CASE("provenance: cuBLASLt's heuristic records its kernels and their sequence as its path",
          "[gpu][provenance]") {
  ProvenanceWorld world;
  CaseSpec spec = case_support::make_case("matmul", "cublaslt-heuristic", DType::bf16,
                                          Pass::forward, {{"N", 4096}, {"K", 4096}}, 64, 1);
  spec.layouts = {"alone", "batch"};
  spec.alone_rows = 2;
  const CaseResult result = world.run(spec);
  INFO(case_support::describe(result));
  REQUIRE(result.verdict != Verdict::error);
  for (const char* layout : {"alone", "batch"}) {
    REQUIRE(result.kernels.count(layout) == 1);
    CHECK_FALSE(result.kernels.at(layout).empty());
    const std::vector<std::string>& paths = result.paths.at(layout);
    CHECK(std::any_of(paths.begin(), paths.end(), [](const std::string& path) {
      return kernel_sequence_declaration().matches(path);
    }));
  }
  // Drift or not (an observation), each side's kernels are there to name.
  for (const DriftMetrics& drift : result.drift) {
    CHECK(result.kernels.count(drift.layout) == 1);
    CHECK(result.kernels.count(drift.reference_layout) == 1);
  }
}
