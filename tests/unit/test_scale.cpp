// scale: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts; the
// FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("scale cpu-fixed-order passes every layout", "[scale]") {
  op_test::expect_passes("scale", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("scale CPU controls drift", "[scale][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("scale", "cpu-tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("scale reference sanity", "[scale][reference]") {
  auto out = op_test::reference("scale", DType::fp32, Pass::forward, {{"H", 2}},
                                {{"x", tensor(DType::fp32, {1, 2}, {2.0f, -1.0f})},
                                 {"scale", tensor(DType::fp32, {1, 2}, {3.0f, 0.5f})}});
  CHECK(out.at("y").get(0) == 6.0f);
  CHECK(out.at("y").get(1) == -0.5f);
  // dscale sums dy * x over every token.
  auto grad = op_test::reference("scale", DType::fp32, Pass::backward, {{"H", 1}},
                                 {{"x", tensor(DType::fp32, {2, 1}, {2.0f, 3.0f})},
                                  {"dy", tensor(DType::fp32, {2, 1}, {1.0f, -1.0f})},
                                  {"scale", tensor(DType::fp32, {1, 1}, {4.0f})}},
                                 2);
  CHECK(grad.at("dscale").get(0) == -1.0f);
  CHECK(grad.at("dx").get(1) == -4.0f);
}
