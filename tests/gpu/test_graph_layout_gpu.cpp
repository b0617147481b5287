// The graph layout on the CUDA backend: rmsnorm's and the elementwise kernels captured into a CUDA
// graph and replayed give the eager bits on the eager paths; the capture control (a path chosen by
// cudaStreamIsCapturing) drifts there and only there; the CUDA attention, which does not capture
// its launches, skips the layout with the reason; verify_K steps of the CUDA attention pass.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;

namespace {

CaseSpec rmsnorm_case(const std::string& impl, DType dtype, Pass pass, std::int64_t width,
                      std::int64_t rows) {
  CaseSpec spec = op_test::make_case("rmsnorm", impl, dtype, pass, {{"H", width}}, rows);
  spec.layouts = {"alone", "batch", graph_layout};
  return spec;
}

}  // namespace

// One-warp rows (H 256), several warps a row (4096) and one block a row (5123: not whole 16-byte
// units), forward and backward (dweight accumulated in the graph's replay), in every dtype.
TEST_CASE("rmsnorm cuda fixed-order replayed from a CUDA graph has the eager bits",
          "[gpu][graph][rmsnorm]") {
  for (std::int64_t width : {256, 4096, 5123}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        for (std::int64_t rows : {1, 33, 300}) {
          CaseResult result = op_test::run(rmsnorm_case("fixed-order", dtype, pass, width, rows));
          INFO("H=" << width << " " << to_string(dtype) << " " << to_string(pass) << " M=" << rows
                    << ": " << op_test::describe(result));
          CHECK(result.verdict == Verdict::pass);
          CHECK(result.layouts_run == std::vector<std::string>{"alone", "batch", "graph"});
          CHECK(result.skipped_layouts.empty());
          // The launches ran under capture and recorded the eager batch's paths.
          REQUIRE(result.paths.count(graph_layout) == 1);
          CHECK(result.paths.at(graph_layout) == result.paths.at("batch"));
        }
      }
    }
  }
}

// The elementwise family's kernels (vector body and scalar tail, H 5123) and scale's dscale
// accumulated in the replay.
TEST_CASE("elementwise cuda fixed-order replayed from a CUDA graph has the eager bits",
          "[gpu][graph][elementwise]") {
  for (const char* op : {"silu", "swiglu", "scale"}) {
    for (std::int64_t width : {4096, 5123}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        CaseSpec spec =
            op_test::make_case(op, "fixed-order", DType::bf16, pass, {{"H", width}}, 33);
        spec.layouts = {"alone", "batch", graph_layout};
        CaseResult result = op_test::run(spec);
        INFO(op << " H=" << width << " " << to_string(pass) << ": " << op_test::describe(result));
        CHECK(result.verdict == Verdict::pass);
        CHECK(result.layouts_run == std::vector<std::string>{"alone", "batch", "graph"});
      }
    }
  }
}

TEST_CASE("the capture control drifts in the graph layout only", "[gpu][graph][rmsnorm][control]") {
  for (DType dtype : {DType::bf16, DType::fp32, DType::fp16}) {
    CaseResult captured =
        op_test::run(rmsnorm_case("path-by-capture", dtype, Pass::forward, 4096, 33));
    INFO(to_string(dtype) << ": " << op_test::describe(captured));
    CHECK(captured.verdict == Verdict::drift);
    CHECK(captured.expected_to_drift);
    for (const DriftMetrics& drift : captured.drift) CHECK(drift.layout == graph_layout);
    // Its eager launches take the fixed-order path: the batch matches alone, and the graph's
    // calls recorded the split rows.
    CHECK(captured.paths.at("batch") == std::vector<std::string>{"forward.rows.multi-warp"});
    CHECK(captured.paths.at(graph_layout) ==
          std::vector<std::string>{"forward.block-per-row", "partials"});
    CaseSpec eager = rmsnorm_case("path-by-capture", dtype, Pass::forward, 4096, 33);
    eager.layouts = {"alone", "batch", "pad_right"};
    CaseResult eager_result = op_test::run(eager);
    INFO(op_test::describe(eager_result));
    CHECK(eager_result.verdict == Verdict::pass);
    CHECK_FALSE(eager_result.expected_to_drift);
  }
}

TEST_CASE("the CUDA attention skips the graph layout with the reason, and passes verify_K",
          "[gpu][graph][attention]") {
  CaseSpec spec = op_test::make_case("attention", "fixed-order", DType::bf16, Pass::forward,
                                     {{"H", 8}, {"KVH", 2}, {"D", 128}, {"L", 300}}, 4);
  spec.layouts = {"seq_alone", "decode", "verify_3", "verify_7", graph_layout};
  CaseResult result = op_test::run(spec);
  INFO(op_test::describe(result));
  CHECK(result.verdict == Verdict::pass);
  CHECK(result.layouts_run ==
        std::vector<std::string>{"seq_alone", "decode", "verify_3", "verify_7"});
  REQUIRE(result.skipped_layouts.count(graph_layout) == 1);
  CHECK_THAT(result.skipped_layouts.at(graph_layout),
             Catch::Contains("cannot be captured into a CUDA graph"));
}
