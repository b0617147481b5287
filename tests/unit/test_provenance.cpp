// Kernel provenance without a GPU: a fake source of kernel records stands in for CUPTI. The runner
// records each layout's kernels, an impl that declares no paths gets its kernel sequence as its
// path (so coverage sees where it switched), a finding and the page name both sides' kernels, and
// nothing is recorded when provenance is off or its source cannot start.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "manifest.h"
#include "report/case_json.h"
#include "report/coverage.h"
#include "report/matrix_render.h"
#include "report/report.h"
#include "report/report_page.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;
using json = nlohmann::json;

namespace {

// What CUPTI would be: the launches an impl announces are what the next take() returns.
class FakeRecorder : public KernelRecorder {
 public:
  std::optional<std::string> start() override {
    if (absent) return off_ = "fake source absent";
    on_ = true;
    return std::nullopt;
  }
  void stop() override { on_ = false; }
  bool recording() const override { return on_; }
  std::string off_reason() const override { return off_; }
  std::vector<KernelLaunch> take() override {
    std::vector<KernelLaunch> taken;
    taken.swap(pending);
    return on_ ? taken : std::vector<KernelLaunch>{};
  }

  bool absent = false;
  std::vector<KernelLaunch> pending;

 private:
  bool on_ = false;
  std::string off_ = "not asked for";
};

KernelLaunch launch(const std::string& name, std::int64_t blocks) {
  KernelLaunch k;
  k.name = name;
  k.grid = {blocks, 1, 1};
  k.block = {128, 1, 1};
  k.shared_bytes = 4096;
  k.dynamic_shared_bytes = 0;
  return k;
}

// A library-default matmul (with no paths declared, unless given): under 4 rows one kernel sums K
// in order; from 4 rows a split-K kernel and its reduction sum K in two halves, so the bits change
// with the batch.
class SplitFromFourMatmul : public Impl {
 public:
  SplitFromFourMatmul(FakeRecorder& recorder, std::string name, std::vector<PathDecl> paths)
      : Impl(ImplInfo::library_default(std::move(name), "cpu", "test-only split-K matmul")
                 .only_passes({Pass::forward})
                 .with_paths(std::move(paths))),
        recorder_(recorder) {}
  void run(Batch& batch) override {
    const bool split = batch.slots() >= 4;
    if (split) {
      recorder_.pending.push_back(launch("gemm_splitk", batch.slots()));
      recorder_.pending.push_back(launch("splitk_reduce", 1));
    } else {
      recorder_.pending.push_back(launch("gemm", batch.slots()));
    }
    const std::int64_t n = batch.spec->dim("N"), k = batch.spec->dim("K");
    const Tensor& x = batch.in("x");
    const Tensor& w = batch.in("w");
    Tensor& y = batch.out("y");
    for (std::int64_t s = 0; s < batch.slots(); ++s) {
      if (batch.is_pad(s)) continue;
      for (std::int64_t j = 0; j < n; ++j) {
        float first = 0.0f, second = 0.0f;
        for (std::int64_t c = 0; c < k; ++c) {
          const float term = x.get(s * k + c) * w.get(j * k + c);
          (split && c >= k / 2 ? second : first) += term;
        }
        y.set(s * n + j, first + second);
      }
    }
  }

 private:
  FakeRecorder& recorder_;
};

// A Python impl's way: the worker reports the kernels, the impl records them itself, and only when
// the recording asks.
class SelfReportingMatmul : public SplitFromFourMatmul {
 public:
  explicit SelfReportingMatmul(FakeRecorder& recorder)
      : SplitFromFourMatmul(recorder, "test-self-reporting", std::vector<PathDecl>{}),
        recorder_(recorder) {}
  void run(Batch& batch) override {
    SplitFromFourMatmul::run(batch);
    std::vector<KernelLaunch> launched;
    launched.swap(recorder_.pending);
    if (!kernels_wanted()) return;
    for (KernelLaunch& k : launched) record_kernel(std::move(k));
  }

 private:
  FakeRecorder& recorder_;
};

// fp32 output: the split sum's other rounding shows in the bits (bf16 would round most of it away).
CaseSpec split_case(const std::string& impl) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype = DType::fp32;
  spec.dtype_name = "fp32";
  spec.pass = Pass::forward;
  spec.dims = {{"N", 16}, {"K", 128}};
  spec.rows = 6;
  spec.seed = 1;
  spec.layouts = {"alone", "batch"};
  return spec;
}

struct World {
  Registry registry;
  Contract contract;
  FakeRecorder* recorder = nullptr;
  World() {
    register_all(registry);
    auto fake = std::make_unique<FakeRecorder>();
    recorder = fake.get();
    registry.set_kernel_recorder("cpu", std::move(fake));
    registry.add_impl("matmul", std::make_unique<SplitFromFourMatmul>(
                                    *recorder, "test-split-from-4", std::vector<PathDecl>{}));
    registry.add_impl("matmul", std::make_unique<SplitFromFourMatmul>(
                                    *recorder, "test-split-declared",
                                    std::vector<PathDecl>{PathDecl("whole", "one sum"),
                                                          PathDecl("split", "two halves")}));
    registry.add_impl("matmul", std::make_unique<SelfReportingMatmul>(*recorder));
    contract = load_embedded_contract(registry);
  }
  void start(bool provenance) {
    RunSettings settings;
    settings.provenance = provenance;
    start_run(registry, settings);
  }
  CaseResult run(const std::string& impl) {
    Runner runner(registry, contract);
    return runner.run_case(split_case(impl));
  }
};

std::vector<std::string> names_of(const std::vector<KernelUse>& uses) {
  std::vector<std::string> names;
  for (const auto& use : uses) names.push_back(use.launch.name);
  return names;
}

}  // namespace

TEST_CASE("provenance: each layout's kernels are recorded, with their launches and calls",
          "[provenance]") {
  World world;
  world.start(true);
  const CaseResult result = world.run("test-split-from-4");
  REQUIRE(result.verdict == Verdict::drift);
  REQUIRE(result.kernels.count("alone") == 1);
  // Alone: 6 rows one at a time, twice (the determinism repeat), all the same launch.
  REQUIRE(result.kernels.at("alone").size() == 1);
  CHECK(result.kernels.at("alone")[0].launch == launch("gemm", 1));
  CHECK(result.kernels.at("alone")[0].calls == 12);
  CHECK(names_of(result.kernels.at("batch")) ==
        std::vector<std::string>{"gemm_splitk", "splitk_reduce"});
  CHECK(result.kernels.at("batch")[0].launch.grid[0] == 6);
}

TEST_CASE("provenance: an impl that declares no paths records its kernel sequence as its path",
          "[provenance][paths]") {
  World world;
  world.start(true);
  const CaseResult result = world.run("test-split-from-4");
  CHECK(result.paths.at("alone") == std::vector<std::string>{"kernels:gemm", "main"});
  CHECK(result.paths.at("batch") ==
        std::vector<std::string>{"kernels:gemm_splitk + splitk_reduce", "main"});

  // Its declarations gain the family, so coverage counts the switch as a crossing that drifted.
  json report = {{"paths_declared", declared_paths_json({result}, world.registry)},
                 {"results", json::array({case_to_json(result)})}};
  const Coverage coverage = compute_coverage(report);
  REQUIRE(coverage.impls.size() == 1);
  REQUIRE(coverage.impls[0].paths.size() == 2);
  const PathCoverage& family = coverage.impls[0].paths[1];
  CHECK(family.decl.name == kernel_sequence_family);
  CHECK_FALSE(family.decl.required);
  CHECK(family.crossings_drifted == 1);
  CHECK(family.members ==
        std::set<std::string>{"kernels:gemm", "kernels:gemm_splitk + splitk_reduce"});
  CHECK(coverage_gaps(coverage).empty());

  // An impl that declares a choice of paths records its kernels, not their sequence as a path (it
  // records no path here, a gap of its own).
  const CaseResult declared = world.run("test-split-declared");
  CHECK(declared.kernels.count("batch") == 1);
  CHECK(declared.paths.at("batch") == std::vector<std::string>{unrecorded_path_name});
}

TEST_CASE("provenance: a finding names the kernels of both layouts, in text and on the page",
          "[provenance][report]") {
  World world;
  world.start(true);
  const CaseResult result = world.run("test-split-from-4");
  REQUIRE(result.verdict == Verdict::drift);
  const json entry = case_to_json(result);
  const std::string expected = "kernels: alone ran gemm; batch ran gemm_splitk + splitk_reduce";
  CHECK(finding_kernels_text(entry, "batch", "alone") == expected);
  CHECK(finding_kernels_text(entry, "batch", "pad_right") ==
        "kernels: pad_right ran no kernel recorded; batch ran gemm_splitk + splitk_reduce");

  const json report = build_report(RunMeta{}, json::object(), {result}, world.registry);
  CHECK_THAT(render_matrix_markdown(report), Catch::Contains(expected));
  const std::string page = render_report_page(report, ReportPageOptions{});
  CHECK_THAT(page, Catch::Contains("[\"gemm_splitk\",[6,1,1],[128,1,1],4096,1]"));
  CHECK_THAT(page, Catch::Contains("[\"gemm\",[1,1,1],[128,1,1],4096,12]"));
}

TEST_CASE("provenance: the kernels survive the report's round trip", "[provenance][report]") {
  World world;
  world.start(true);
  const CaseResult result = world.run("test-split-from-4");
  const json entry = case_to_json(result);
  const CaseResult read = case_from_json(JsonCursor(entry, "test"));
  CHECK(case_to_json(read) == entry);
  REQUIRE(read.kernels.at("batch").size() == 2);
  CHECK(read.kernels.at("batch")[1].launch == launch("splitk_reduce", 1));

  json wrong = entry;
  wrong["kernels"]["batch"][0]["grid"] = json::array({6, 1});
  CHECK_THROWS_WITH(
      case_from_json(JsonCursor(wrong, "test")),
      Catch::Contains("$.kernels.batch[0].grid") && Catch::Contains("three dimensions"));
}

TEST_CASE("provenance: off, or with a source that cannot start, records no kernels",
          "[provenance]") {
  World world;
  world.start(false);
  const CaseResult off = world.run("test-split-from-4");
  CHECK(off.kernels.empty());
  CHECK(off.paths.at("batch") == std::vector<std::string>{"main"});
  CHECK(off.verdict == Verdict::drift);  // the checks do not depend on it

  world.recorder->absent = true;
  world.start(true);
  CHECK_FALSE(world.recorder->recording());
  CHECK(world.recorder->off_reason() == "fake source absent");
  const CaseResult absent = world.run("test-split-from-4");
  CHECK(absent.kernels.empty());
}

TEST_CASE("provenance: an impl that reports its own kernels records them only when asked",
          "[provenance]") {
  World world;
  world.start(true);
  const CaseResult on = world.run("test-self-reporting");
  CHECK(names_of(on.kernels.at("batch")) ==
        std::vector<std::string>{"gemm_splitk", "splitk_reduce"});
  CHECK(on.paths.at("batch") ==
        std::vector<std::string>{"kernels:gemm_splitk + splitk_reduce", "main"});
  world.start(false);
  CHECK(world.run("test-self-reporting").kernels.empty());
}

TEST_CASE("provenance: kernel names and sequences as a report shows them", "[provenance]") {
  CHECK(readable_kernel_name("_ZN8bitcheck12_GLOBAL__N_110rms_kernelIfLi4EEEvPKfPfi") ==
        "bitcheck::(anonymous namespace)::rms_kernel<float, 4>");
  CHECK(readable_kernel_name("void at::native::vectorized_elementwise_kernel<4, "
                             "at::native::FillFunctor<float>>(int, float*)") ==
        "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>");
  CHECK(readable_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") ==
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64");

  CHECK(kernel_sequence_path({}).empty());
  CHECK(kernel_sequence_path({launch("a", 1), launch("b", 2), launch("b", 3), launch("a", 1)}) ==
        "kernels:a + b (x2) + a");

  std::vector<KernelUse> uses;
  tally_kernels({launch("a", 1), launch("a", 2), launch("a", 1)}, uses);
  REQUIRE(uses.size() == 2);
  CHECK(uses[0].calls == 2);
  CHECK(kernel_names(uses) == std::vector<std::string>{"a"});
  CHECK(launch_text(launch("a", 2)) == "a<<<(2,1,1), (128,1,1), shared 4096 (dynamic 0)>>>");
}
