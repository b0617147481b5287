// matmul on the CUDA backend: fixed-order and cuBLASLt-pinned pass every layout forward and
// backward in every dtype (shapes with odd M and tails); the cuBLASLt heuristic control drifts
// where the library switches split-K with M; every pinned result records its configuration.
#include <catch2/catch.hpp>

#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("matmul cuda invariant impls pass every layout, forward and backward", "[gpu][matmul]") {
  for (const char* impl : {"fixed-order", "cublaslt-pinned"}) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        for (Dims dims : {Dims{{"N", 264}, {"K", 200}}, Dims{{"N", 512}, {"K", 1024}}}) {
          CaseResult result = run(make_case("matmul", impl, dtype, pass, dims, 37));
          INFO(impl << " " << to_string(dtype) << " " << to_string(pass) << " " << dims_string(dims)
                    << ": " << describe(result));
          CHECK(result.verdict == Verdict::pass);
          if (std::string(impl) == "cublaslt-pinned") {
            REQUIRE(result.impl_config.contains("cublaslt"));
            CHECK(result.impl_config["cublaslt"].contains(pass == Pass::forward ? "forward"
                                                                                : "input_grad"));
          }
        }
      }
    }
  }
}

TEST_CASE("matmul cuda heuristic control drifts on a Llama shape", "[gpu][matmul][control]") {
  // Measured on an H200 with cuBLASLt 13.1: for N = K = 4096 bf16 the heuristic picks split-K 2
  // at M = 1 and split-K 1 from M = 64, so rows computed alone differ from the same rows in a
  // batch.
  CaseSpec spec = make_case("matmul", "cublaslt-heuristic", DType::bf16, Pass::forward,
                            {{"N", 4096}, {"K", 4096}}, 64);
  spec.alone_rows = 8;
  spec.layouts = {"alone", "batch"};
  CaseResult result = run(spec);
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::drift);
  CHECK(result.drift.front().tensor == "y");
  CHECK(result.drift.front().max_abs_diff > 0.0);
}
