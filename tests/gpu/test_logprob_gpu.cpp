// logprob on the CUDA backend (small shapes): the fixed-piece impl passes every layout forward and
// backward, the split-by-rows control drifts, an out-of-range target is reported by the device.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "cuda_impls.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("logprob cuda fixed-order passes every layout, forward and backward", "[gpu][logprob]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      for (std::int64_t vocab :
           {9000, 1001}) {  // several pieces; a row length that is not a multiple of 8
        CaseResult result =
            run(make_case("logprob", "fixed-order", dtype, pass, {{"V", vocab}}, 20));
        INFO(to_string(dtype) << " " << to_string(pass) << " V=" << vocab << ": "
                              << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("logprob cuda split-vocab-by-rows drifts", "[gpu][logprob][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("logprob", "split-vocab-by-rows", DType::fp32, pass, {{"V", 5000}}, 20));
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::drift);
  }
}

TEST_CASE("logprob cuda reports an out-of-range target from the device", "[gpu][logprob][error]") {
  Registry registry = vocab_test::out_of_range_registry("logprob", register_logprob_cuda, "cuda");
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("logprob", "fixed-order", DType::bf16, pass, {{"V", 64}}, 16), registry);
    INFO(to_string(pass) << ": " << describe(result));
    REQUIRE(result.verdict == Verdict::error);
    auto at = result.reason.find("token id ");
    REQUIRE(at != std::string::npos);
    CHECK(std::strtol(result.reason.c_str() + at + 9, nullptr, 10) >= 64);
  }
}
