// cast: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts; the
// FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("cast cpu-fixed-order passes every layout", "[cast]") {
  op_test::expect_passes("cast", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("cast CPU controls drift", "[cast][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp16})
      op_test::expect_drifts("cast", "cpu-tail-round-toward-zero", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("cast reference sanity", "[cast][reference]") {
  auto out = op_test::reference("cast", DType::bf16, Pass::forward, {{"H", 1}},
                                {{"x", tensor(DType::bf16, {1, 1}, {1.5f})},
                                 {"x32", tensor(DType::fp32, {1, 1}, {1.00390625f})}});
  CHECK(out.at("y32").get(0) == 1.5f);       // widening is exact
  CHECK(out.at("y").get(0) == 1.00390625f);  // the reference is exact; the output rounds once
  // The fp32 cast has no rounding to differ: the control is skipped there, with the reason.
  CaseResult skipped = op_test::run(op_test::make_case("cast", "cpu-tail-round-toward-zero",
                                                       DType::fp32, Pass::forward, {{"H", 13}}, 3));
  CHECK(skipped.verdict == Verdict::skipped);
}
