// attention on the GPU: the fixed-order CUDA impl passes every sequence layout (tensor-core path
// for bf16/fp16 at head dim 64 and 128, SIMT for fp32; SIMT backward), and each CUDA control drifts.
#include <catch2/catch.hpp>

#include "bitcheck/contract.h"
#include "bitcheck/runner.h"

using namespace bitcheck;

namespace {

struct GpuWorld {
  Registry registry;
  Contract contract;
  GpuWorld() {
    register_all(registry);
    contract = load_embedded_contract(registry);
  }
};

GpuWorld& gpu_world() {
  static GpuWorld instance;
  return instance;
}

CaseResult run_attention(const std::string& impl, DType dtype, Pass pass, std::int64_t head_dim, std::int64_t sequences) {
  CaseSpec spec;
  spec.op = "attention";
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.pass = pass;
  spec.dims = {{"H", 8}, {"KVH", 2}, {"D", head_dim}, {"L", 300}};
  spec.rows = sequences;
  spec.seed = 7;
  spec.layouts = {"seq_alone", "varlen_packed", "padded", "chunked_1", "chunked_16", "chunked_64", "chunked_1000", "decode"};
  Runner runner(gpu_world().registry, gpu_world().contract);
  return runner.run_case(spec);
}

std::string describe(const CaseResult& result) {
  std::string text = to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift) text += " [" + drift.layout + " " + drift.tensor + "]";
  for (const auto& accuracy : result.accuracy) {
    text += " {" + accuracy.tensor + " max_abs_error " + std::to_string(accuracy.max_abs_error) + "}";
  }
  return text;
}

}  // namespace

TEST_CASE("attention fixed-order CUDA passes every sequence layout", "[gpu][attention]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (std::int64_t head_dim : {64, 128}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        CaseResult result = run_attention("fixed-order", dtype, pass, head_dim, 4);
        INFO(to_string(dtype) << " D=" << head_dim << " " << to_string(pass) << ": " << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("each attention CUDA control drifts", "[gpu][attention][control]") {
  struct Control {
    const char* impl;
    Pass pass;
  };
  for (Control control : {Control{"split-kv-by-batch", Pass::forward}, Control{"kv-block-by-length", Pass::forward},
                          Control{"atomic-dq", Pass::backward}}) {
    CaseResult result = run_attention(control.impl, DType::bf16, control.pass, 128, 4);
    INFO(control.impl << ": " << describe(result));
    CHECK((result.verdict == Verdict::drift || result.verdict == Verdict::nondeterministic));
  }
}
