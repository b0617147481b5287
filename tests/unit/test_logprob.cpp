// logprob and lm_head_logprob on the CPU backend: the fixed-order impls pass every layout forward
// and backward (with more than one 4096-entry chunk), the controls drift, an out-of-range target
// is an error naming it.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "logprob/logprob.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("logprob cpu-fixed-order passes every layout, forward and backward", "[logprob]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result =
          run(make_case("logprob", "cpu-fixed-order", dtype, pass, {{"V", 4096 + 300}}, 7));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
      CHECK(result.verdict == Verdict::pass);
    }
  }
}

TEST_CASE("logprob cpu-split-vocab-by-rows drifts", "[logprob][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("logprob", "cpu-split-vocab-by-rows", DType::fp32, pass, {{"V", 1000}}, 9));
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::drift);
  }
}

TEST_CASE("logprob rejects an out-of-range target with an error naming it", "[logprob][error]") {
  Registry registry = vocab_test::out_of_range_registry("logprob", register_logprob_cpu, "cpu");
  CaseResult result =
      run(make_case("logprob", "cpu-fixed-order", DType::bf16, Pass::forward, {{"V", 50}}, 16),
          registry);
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::error);
  auto at = result.reason.find("token id ");
  REQUIRE(at != std::string::npos);
  CHECK(std::strtol(result.reason.c_str() + at + 9, nullptr, 10) >= 50);
}

TEST_CASE("lm_head_logprob cpu-fixed-order passes every layout, forward and backward",
          "[lm_head_logprob]") {
  for (DType dtype : {DType::bf16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result = run(
          make_case("lm_head_logprob", "cpu-fixed-order", dtype, pass, {{"V", 200}, {"H", 48}}, 9));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
      CHECK(result.verdict == Verdict::pass);
    }
  }
}

TEST_CASE("lm_head_logprob cpu-split-k-by-rows drifts", "[lm_head_logprob][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result = run(make_case("lm_head_logprob", "cpu-split-k-by-rows", DType::bf16, pass,
                                      {{"V", 200}, {"H", 48}}, 9));
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::drift);
  }
}
