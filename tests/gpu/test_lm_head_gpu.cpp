// lm_head and lm_head_logprob on the CUDA backend (small shapes): the invariant GEMM paths pass
// every layout, the cuBLASLt heuristic control drifts in the backward pass, and a tied table gives
// the same bits as an untied copy in another device buffer.
#include <catch2/catch.hpp>
#include <memory>

#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;
using vocab_test::world;

TEST_CASE("lm_head cuda invariant paths pass every layout, forward and backward",
          "[gpu][lm_head]") {
  for (const char* impl : {"fixed-order", "cublaslt-pinned"}) {
    for (DType dtype : {DType::bf16, DType::fp32}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        CaseResult result =
            run(make_case("lm_head", impl, dtype, pass, {{"V", 1024}, {"H", 128}}, 40));
        INFO(impl << " " << to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("lm_head cuda cublaslt-heuristic drifts in the backward pass",
          "[gpu][lm_head][control]") {
  CaseResult result = run(make_case("lm_head", "cublaslt-heuristic", DType::bf16, Pass::backward,
                                    {{"V", 4096}, {"H", 128}}, 40));
  INFO(describe(result));
  CHECK((result.verdict == Verdict::drift || result.verdict == Verdict::nondeterministic));
}

TEST_CASE("lm_head_logprob cuda fixed-order passes and the heuristic drifts",
          "[gpu][lm_head_logprob]") {
  for (DType dtype : {DType::bf16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result = run(
          make_case("lm_head_logprob", "fixed-order", dtype, pass, {{"V", 5000}, {"H", 64}}, 20));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
      CHECK(result.verdict == Verdict::pass);
    }
  }
  CaseResult control = run(make_case("lm_head_logprob", "cublaslt-heuristic", DType::bf16,
                                     Pass::backward, {{"V", 4096}, {"H", 128}}, 40));
  INFO(describe(control));
  CHECK((control.verdict == Verdict::drift || control.verdict == Verdict::nondeterministic));
}

TEST_CASE("lm_head cuda gives identical bits for a tied table and an untied copy",
          "[gpu][lm_head][tied]") {
  const std::int64_t vocab = 256, hidden = 64;
  CaseSpec spec = make_case("lm_head", "fixed-order", DType::bf16, Pass::forward,
                            {{"V", vocab}, {"H", hidden}}, 3);
  Impl* impl = world().registry.find_impl("lm_head", "fixed-order");
  Invocation invocation;
  invocation.slot_rows = {0, -1, 1, 2};
  Tensor table(DType::bf16, {vocab, hidden}), h(DType::bf16, {4, hidden});
  for (std::int64_t i = 0; i < table.numel(); ++i)
    table.set(i, static_cast<float>((i * 37) % 101 - 50) / 400.0f);
  for (std::int64_t i = 0; i < h.numel(); ++i)
    h.set(i, static_cast<float>((i * 13) % 29 - 14) / 9.0f);
  auto tied = std::make_shared<const Tensor>(table);
  auto copy = std::make_shared<const Tensor>(Tensor(table));
  auto logits_with = [&](std::shared_ptr<const Tensor> weights, std::uint64_t id) {
    Batch batch;
    batch.spec = &spec;
    batch.invocation = &invocation;
    batch.inputs = {{"h", std::make_shared<const Tensor>(h)}, {"table", weights}};
    batch.input_ids = {{"h", 1}, {"table", id}};  // distinct ids: two device buffers
    Tensor logits(DType::bf16, {4, vocab});
    logits.fill_nan();
    batch.outputs.emplace("logits", std::move(logits));
    impl->run(batch);
    return batch.outputs.at("logits");
  };
  CHECK(logits_with(tied, 1u << 30).bitwise_equal(logits_with(copy, (1u << 30) + 1)));
}
