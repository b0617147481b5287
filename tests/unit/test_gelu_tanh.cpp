// gelu_tanh: the CPU fixed-order impl passes every layout, dtype and pass; each CPU control drifts;
// the FP32 reference agrees with known values.
#include <catch2/catch.hpp>

#include "unit/op_case.h"

using namespace bitcheck;
using op_test::tensor;

TEST_CASE("gelu_tanh cpu-fixed-order passes every layout", "[gelu_tanh]") {
  op_test::expect_passes("gelu_tanh", "cpu-fixed-order", {{"H", 1003}}, {1, 3, 16});
}

TEST_CASE("gelu_tanh CPU controls drift", "[gelu_tanh][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("gelu_tanh", "cpu-tail-approx", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("gelu_tanh", "cpu-tail-downcast-bf16", {{"H", 1003}}, dtype, pass,
                             {1, 3, 7, 16});
  }
}

TEST_CASE("gelu_tanh reference sanity", "[gelu_tanh][reference]") {
  auto out = op_test::reference("gelu_tanh", DType::fp32, Pass::forward, {{"H", 3}},
                                {{"x", tensor(DType::fp32, {1, 3}, {0.0f, 1.0f, -1.0f})}});
  CHECK(out.at("y").get(0) == Approx(0.0).margin(1e-6));
  CHECK(out.at("y").get(1) == Approx(0.8411920).margin(1e-6));
  CHECK(out.at("y").get(2) == Approx(-0.1588080).margin(1e-6));
}
