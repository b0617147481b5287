// embedding on the CUDA backend (small shapes): the fixed-order impl passes every layout forward
// and backward, the atomicAdd scatter drifts, an out-of-range id is reported by the device.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "embedding/embedding.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("embedding cuda fixed-order passes every layout, forward and backward",
          "[gpu][embedding]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      for (std::int64_t hidden : {64, 36}) {  // 36 bf16: rows not a multiple of 16 bytes
        CaseResult result =
            run(make_case("embedding", "fixed-order", dtype, pass, {{"V", 5}, {"H", hidden}}, 40));
        INFO(to_string(dtype) << " " << to_string(pass) << " H=" << hidden << ": "
                              << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("embedding cuda atomic-add-scatter drifts in dtable", "[gpu][embedding][control]") {
  CaseResult result = run(make_case("embedding", "atomic-add-scatter", DType::fp32, Pass::backward,
                                    {{"V", 3}, {"H", 64}}, 300));
  INFO(describe(result));
  CHECK((result.verdict == Verdict::drift || result.verdict == Verdict::nondeterministic));
}

TEST_CASE("embedding cuda reports an out-of-range id from the device", "[gpu][embedding][error]") {
  Registry registry =
      vocab_test::out_of_range_registry("embedding", register_embedding_cuda, "cuda");
  for (const char* impl : {"fixed-order", "atomic-add-scatter"}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result =
          run(make_case("embedding", impl, DType::bf16, pass, {{"V", 7}, {"H", 16}}, 16), registry);
      INFO(impl << " " << to_string(pass) << ": " << describe(result));
      REQUIRE(result.verdict == Verdict::error);
      auto at = result.reason.find("token id ");
      REQUIRE(at != std::string::npos);
      CHECK(std::strtol(result.reason.c_str() + at + 9, nullptr, 10) >= 7);
    }
  }
}
