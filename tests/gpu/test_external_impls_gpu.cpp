// Impls from outside bitcheck on the GPU: the example plugin's CUDA matmuls (its fixed-order kernel
// passes every layout, its split-K control drifts), PyTorch's F.linear observed drifting at
// M = 257, N = K = 4096 bf16 (measured on an H100: every row differs from its one-row call), the
// Triton fixed-order matmul passing every layout, and Python failures on the GPU path (an
// exception, a result on the host, a wrong shape) as case errors. The Python cases need torch (and
// triton, cupy or the driver API) in the worker's python3: without them they are skipped with a
// message. With provenance, the plugin's kernels (CUPTI) and PyTorch's (the worker's profiler).
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "external/plugin_loader.h"
#include "manifest.h"
#include "report/case_json.h"
#include "report/matrix_render.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

// This binary's directory: in a bundle, the plugin is in ../plugins and bitcheck_py in ../python.
std::filesystem::path binary_directory() {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path();
}

// The first path that exists: the environment's, the build tree's, the bundle's.
std::string first_existing(const char* variable, const std::vector<std::filesystem::path>& paths) {
  if (const char* chosen = std::getenv(variable); chosen && *chosen) return chosen;
  for (const auto& path : paths) {
    if (std::filesystem::exists(path)) return path.string();
  }
  return paths.front().string();
}

std::string python_examples() {
  return first_existing("BITCHECK_PYTHON_EXAMPLES",
                        {std::filesystem::path(BITCHECK_SOURCE_DIR) / "python/examples",
                         binary_directory().parent_path() / "python/examples"});
}

std::string python() {
  const char* chosen = std::getenv("BITCHECK_PYTHON");
  return chosen && *chosen ? chosen : "python3";
}

bool python_has(const std::string& modules) {
  return std::system((python() + " -c 'import " + modules + "' > /dev/null 2>&1").c_str()) == 0;
}

struct GpuWorld {
  Registry registry;
  Contract contract;
  GpuWorld() {
    register_all(registry);
    contract = load_embedded_contract(registry);
    const std::string plugin =
        first_existing("BITCHECK_EXAMPLE_PLUGIN",
                       {BITCHECK_EXAMPLE_PLUGIN, binary_directory().parent_path() / "plugins" /
                                                     "libbitcheck_example_plugin.so"});
    load_external_impls(registry, {{plugin}, {}});
  }
  // Registers Python impls once, with python/examples on the worker's path.
  void load_python(const std::vector<std::string>& functions) {
    ::setenv("PYTHONPATH", python_examples().c_str(), 1);
    load_external_impls(registry, {{}, functions});
  }
};

GpuWorld& world() {
  static GpuWorld instance;
  return instance;
}

CaseSpec matmul_case(const std::string& impl, DType dtype, std::int64_t n, std::int64_t k,
                     std::int64_t rows) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.dims = {{"N", n}, {"K", k}};
  spec.rows = rows;
  spec.seed = 11;
  spec.layouts = known_layouts();
  return spec;
}

CaseResult run(const CaseSpec& spec) {
  Runner runner(world().registry, world().contract);
  return runner.run_case(spec);
}

// Provenance on for a test's lifetime (the world is shared with the other tests).
struct ProvenanceOn {
  ProvenanceOn() {
    RunSettings settings;
    settings.provenance = true;
    start_run(world().registry, settings);
  }
  ~ProvenanceOn() { start_run(world().registry, RunSettings{}); }
};

std::string describe(const CaseResult& result) {
  std::string text = to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift) text += " [" + drift.layout + " " + drift.tensor + "]";
  return text;
}

}  // namespace

TEST_CASE("the example plugin's CUDA fixed-order matmul passes and its control drifts",
          "[gpu][plugins]") {
  for (DType dtype : {DType::bf16, DType::fp32}) {
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{264, 200}, {512, 1024}}) {
      CaseResult fixed = run(matmul_case("plugin:example/fixed-order-cuda", dtype, n, k, 37));
      INFO(to_string(dtype) << " N=" << n << " K=" << k << ": " << describe(fixed));
      CHECK(fixed.verdict == Verdict::pass);
      CaseResult control =
          run(matmul_case("plugin:example/split-k-by-batch-cuda", dtype, n, k, 37));
      INFO(describe(control));
      CHECK(control.verdict == Verdict::drift);
    }
  }
}

TEST_CASE("PyTorch's F.linear is observed drifting at M = 257, N = K = 4096 bf16",
          "[gpu][python]") {
  if (!python_has("torch")) {
    WARN("no torch in " << python() << " (BITCHECK_PYTHON): the PyTorch observation is skipped");
    return;
  }
  world().load_python({"torch_defaults:linear"});
  CaseSpec spec = matmul_case("py:torch_defaults:linear", DType::bf16, 4096, 4096, 257);
  spec.layouts = {"alone", "batch"};
  spec.alone_rows = 8;
  CaseResult result = run(spec);
  INFO(describe(result));
  CHECK(result.is_observation);
  REQUIRE(result.verdict == Verdict::drift);
  CHECK(result.drift.front().tensor == "y");
}

TEST_CASE("the Triton fixed-order matmul passes every layout", "[gpu][python]") {
  if (!python_has("torch, triton")) {
    WARN("no torch and triton in " << python() << " (BITCHECK_PYTHON): the Triton case is skipped");
    return;
  }
  world().load_python({"triton_matmul:matmul"});
  for (DType dtype : {DType::bf16, DType::fp32}) {
    CaseResult result = run(matmul_case("py:triton_matmul:matmul", dtype, 512, 1024, 257));
    INFO(to_string(dtype) << ": " << describe(result));
    CHECK(result.verdict == Verdict::pass);
  }
}

TEST_CASE("a Python impl that raises or answers from the host is that case's error on the GPU",
          "[gpu][python]") {
  if (!python_has("torch")) {
    WARN("no torch in " << python() << " (BITCHECK_PYTHON): skipped");
    return;
  }
  world().load_python({"broken:raises_cuda", "broken:on_the_host_cuda", "broken:wrong_shape_cuda"});
  CaseResult raised = run(matmul_case("py:broken:raises_cuda", DType::bf16, 64, 64, 3));
  CHECK(raised.verdict == Verdict::error);
  CHECK_THAT(raised.reason, Catch::Contains("RuntimeError: this CUDA impl raises on purpose"));
  CaseResult host = run(matmul_case("py:broken:on_the_host_cuda", DType::bf16, 64, 64, 3));
  CHECK(host.verdict == Verdict::error);
  CHECK_THAT(host.reason,
             Catch::Contains("expected a torch tensor on cuda:0, got a tensor on cpu"));
  CaseResult shape = run(matmul_case("py:broken:wrong_shape_cuda", DType::bf16, 64, 64, 3));
  CHECK(shape.verdict == Verdict::error);
  CHECK_THAT(shape.reason, Catch::Contains("matmul output y: expected shape ("));
  CHECK_THAT(shape.reason, Catch::Contains(", 64) bfloat16, got shape ("));
  CHECK_THAT(shape.reason, Catch::Contains(", 63) bfloat16"));
  // The worker still answers: a case after the failures passes.
  world().load_python({"triton_matmul:matmul"});
  if (python_has("triton")) {
    CHECK(run(matmul_case("py:triton_matmul:matmul", DType::bf16, 64, 64, 3)).verdict ==
          Verdict::pass);
  }
}

TEST_CASE("provenance: a plugin's kernels are recorded through CUPTI in every layout",
          "[gpu][plugins][provenance]") {
  ProvenanceOn provenance;
  CaseResult control =
      run(matmul_case("plugin:example/split-k-by-batch-cuda", DType::bf16, 512, 1024, 37));
  INFO(describe(control));
  REQUIRE(control.verdict == Verdict::drift);
  for (const std::string& layout : control.layouts_run) {
    INFO(layout);
    CHECK_FALSE(control.kernels[layout].empty());
  }
}

TEST_CASE("provenance: a Python impl's kernels come back from the worker's profiler",
          "[gpu][python][provenance]") {
  if (!python_has("torch")) {
    WARN("no torch in " << python() << " (BITCHECK_PYTHON): the Python provenance is skipped");
    return;
  }
  world().load_python({"torch_defaults:linear"});
  ProvenanceOn provenance;
  CaseSpec spec = matmul_case("py:torch_defaults:linear", DType::bf16, 4096, 4096, 257);
  spec.layouts = {"alone", "batch"};
  spec.alone_rows = 8;
  CaseResult result = run(spec);
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::drift);
  for (const char* layout : {"alone", "batch"}) {
    REQUIRE_FALSE(result.kernels[layout].empty());
    CHECK(result.kernels[layout].front().launch.block[0] > 1);
  }
  const DriftMetrics& drift = result.drift.front();
  const std::string kernels =
      finding_kernels_text(case_to_json(result), drift.layout, drift.reference_layout);
  INFO(kernels);
  CHECK(kernels.find("no kernel recorded") == std::string::npos);
}

namespace {

// A bf16 matmul case of `impl` over alone, batch and the graph layout.
CaseResult run_with_graph(const std::string& impl, std::int64_t n, std::int64_t k,
                          std::int64_t rows) {
  CaseSpec spec = matmul_case(impl, DType::bf16, n, k, rows);
  spec.layouts = {"alone", "batch", graph_layout};
  return run(spec);
}

// Why the case skipped the graph layout ("" when it did not).
std::string graph_skipped_because(const CaseResult& result) {
  auto skipped = result.skipped_layouts.find(graph_layout);
  return skipped == result.skipped_layouts.end() ? "" : skipped->second;
}

}  // namespace

// The graph layout from outside: the example plugin's launches on its stream are captured and
// replayed with the eager bits (on an H100 its copies under capture were accepted); F.linear is
// captured by torch.cuda.graph and replayed; a function that reads a value back to the host runs
// eagerly and skips the layout, with torch's reason.
TEST_CASE("impls from outside in the graph layout: captured, or skipped with the reason",
          "[gpu][graph][plugins][python]") {
  CaseResult plugin = run_with_graph("plugin:example/fixed-order-cuda", 264, 200, 37);
  INFO(describe(plugin));
  CHECK(plugin.verdict == Verdict::pass);
  CHECK(graph_skipped_because(plugin).empty());
  CHECK(plugin.layouts_run == std::vector<std::string>{"alone", "batch", "graph"});
  if (!python_has("torch")) {
    WARN("no torch in " << python() << " (BITCHECK_PYTHON): the Python graph cases are skipped");
    return;
  }
  world().load_python({"torch_defaults:linear", "broken:reads_back_cuda"});
  CaseResult linear = run_with_graph("py:torch_defaults:linear", 512, 512, 33);
  INFO(describe(linear));
  CHECK(linear.verdict != Verdict::error);
  CHECK(linear.layouts_run == std::vector<std::string>{"alone", "batch", "graph"});
  CaseResult reads_back = run_with_graph("py:broken:reads_back_cuda", 64, 64, 3);
  INFO(describe(reads_back));
  CHECK(reads_back.verdict == Verdict::pass);
  CHECK_THAT(graph_skipped_because(reads_back),
             Catch::Contains("cannot be captured by torch.cuda.graph"));
}
