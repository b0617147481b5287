// swiglu: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts;
// the FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("swiglu cpu-fixed-order passes every layout", "[swiglu]") {
  op_test::expect_passes("swiglu", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("swiglu CPU controls drift", "[swiglu][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("swiglu", "cpu-tail-approx", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("swiglu", "cpu-tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("swiglu reference sanity", "[swiglu][reference]") {
  auto out = op_test::reference("swiglu", DType::fp32, Pass::forward, {{"H", 2}},
                                {{"a", tensor(DType::fp32, {1, 2}, {0.0f, 1.0f})},
                                 {"b", tensor(DType::fp32, {1, 2}, {5.0f, 2.0f})}});
  CHECK(out.at("y").get(0) == 0.0f);  // silu(0) = 0 whatever b
  CHECK(out.at("y").get(1) == Approx(2.0 * 0.7310586));
}
