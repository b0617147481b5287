// lm_head on the CPU backend: the fixed-order impl passes every layout forward and backward, the
// K-split control drifts, and the tied table (the embedding's own tensor) gives the same bits as an
// untied copy in another buffer.
#include <catch2/catch.hpp>
#include <memory>

#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;
using vocab_test::world;

TEST_CASE("lm_head cpu-fixed-order passes every layout, forward and backward", "[lm_head]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result =
          run(make_case("lm_head", "cpu-fixed-order", dtype, pass, {{"V", 96}, {"H", 40}}, 9));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << describe(result));
      CHECK(result.verdict == Verdict::pass);
    }
  }
}

TEST_CASE("lm_head cpu-split-k-by-rows drifts forward and backward", "[lm_head][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result = run(
        make_case("lm_head", "cpu-split-k-by-rows", DType::bf16, pass, {{"V", 96}, {"H", 40}}, 9));
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::drift);
  }
}

TEST_CASE("lm_head and embedding declare one table: tied weights", "[lm_head][tied]") {
  CaseSpec spec = make_case("lm_head", "cpu-fixed-order", DType::bf16, Pass::forward,
                            {{"V", 64}, {"H", 32}}, 4);
  const OpDef* lm_head = world().registry.find_op("lm_head");
  const OpDef* embedding = world().registry.find_op("embedding");
  auto find = [](const std::vector<TensorDecl>& decls) {
    for (const auto& decl : decls) {
      if (decl.name == "table") return decl;
    }
    FAIL("no table");
    return TensorDecl{};
  };
  TensorDecl a = find(lm_head->tensors(spec)), b = find(embedding->tensors(spec));
  CHECK(a.role == TensorRole::parameter);
  CHECK(a.shape == b.shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.scale == b.scale);
}

TEST_CASE("lm_head gives identical bits for a tied table and an untied copy", "[lm_head][tied]") {
  for (DType dtype : {DType::bf16, DType::fp32}) {
    CaseSpec spec =
        make_case("lm_head", "cpu-fixed-order", dtype, Pass::forward, {{"V", 64}, {"H", 32}}, 3);
    Impl* impl = world().registry.find_impl("lm_head", "cpu-fixed-order");
    Invocation invocation;
    invocation.slot_rows = {0, -1, 1, 2};
    Tensor table(dtype, {64, 32}), h(dtype, {4, 32});
    for (std::int64_t i = 0; i < table.numel(); ++i)
      table.set(i, static_cast<float>((i * 37) % 101 - 50) / 173.0f);
    h.fill_nan();
    for (std::int64_t i = 0; i < 32; ++i) {
      for (std::int64_t s : {0, 2, 3})
        h.set(s * 32 + i, static_cast<float>((i * 13 + s * 7) % 29 - 14) / 9.0f);
    }
    auto tied = std::make_shared<const Tensor>(table);
    auto copy = std::make_shared<const Tensor>(Tensor(table));  // same values, another buffer
    REQUIRE(tied->data() != copy->data());
    auto logits_with = [&](std::shared_ptr<const Tensor> weights, std::uint64_t id) {
      Batch batch;
      batch.spec = &spec;
      batch.invocation = &invocation;
      batch.inputs = {{"h", std::make_shared<const Tensor>(h)}, {"table", weights}};
      batch.input_ids = {{"h", 1}, {"table", id}};
      Tensor logits(dtype, {4, 64});
      logits.fill_nan();
      batch.outputs.emplace("logits", std::move(logits));
      impl->run(batch);
      return batch.outputs.at("logits");
    };
    Tensor from_tied = logits_with(tied, 10), from_copy = logits_with(copy, 11);
    CHECK(from_tied.bitwise_equal(from_copy));
  }
}
