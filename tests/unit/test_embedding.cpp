// embedding on the CPU backend: the fixed-order impl passes every layout forward and backward
// (pad slots hold INT32_MIN ids and are skipped), the control drifts, an out-of-range id is an
// error naming the id.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "embedding/embedding.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("embedding cpu-fixed-order passes every layout, forward and backward", "[embedding]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      // V = 5 with 40 tokens: every id repeats, so dtable really sums several tokens per row.
      CaseResult result =
          run(make_case("embedding", "cpu-fixed-order", dtype, pass, {{"V", 5}, {"H", 24}}, 40));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
      CHECK(result.verdict == Verdict::pass);
      CHECK(result.layouts_run.size() == known_layouts().size());
    }
  }
}

TEST_CASE("embedding cpu-reverse-when-padded drifts in dtable", "[embedding][control]") {
  // fp32 dout: sums of 3+ tokens of one id round differently when reordered.
  CaseResult result = run(make_case("embedding", "cpu-reverse-when-padded", DType::fp32,
                                    Pass::backward, {{"V", 3}, {"H", 32}}, 40));
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::drift);
  CHECK(result.drift.front().tensor == "dtable");
  // Its forward is a plain gather: nothing to drift.
  CHECK(run(make_case("embedding", "cpu-reverse-when-padded", DType::bf16, Pass::forward,
                      {{"V", 3}, {"H", 32}}, 9))
            .verdict == Verdict::pass);
}

TEST_CASE("embedding rejects an out-of-range id with an error naming it", "[embedding][error]") {
  Registry registry = vocab_test::out_of_range_registry("embedding", register_embedding_cpu, "cpu");
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("embedding", "cpu-fixed-order", DType::bf16, pass, {{"V", 7}, {"H", 16}}, 16),
            registry);
    INFO(describe(result));
    REQUIRE(result.verdict == Verdict::error);
    auto at = result.reason.find("token id ");
    REQUIRE(at != std::string::npos);
    const long id = std::strtol(result.reason.c_str() + at + 9, nullptr, 10);
    CHECK(id >= 7);
    CHECK(id < 14);
    CHECK(result.reason.find("out of range [0, 7)") != std::string::npos);
  }
}
