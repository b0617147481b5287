// The building blocks of the vocab-parallel and head-parallel TP ops on simulated ranks: the row
// max in an order of its values alone, the sum of exponentials over V whose fixed-order bits do not
// depend on tp while the rank chain's do, a head-parallel rank's case, and the embedding's id
// check.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/attention_tp.h"
#include "common/vocab_tp_cpu.h"
#include "core/rng.h"
#include "embedding/embedding.h"
#include "unit/case_support.h"

using namespace bitcheck;

namespace {

std::uint32_t bits_of(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// A row of `count` logits in [-4, 4), rounded to bf16, as logprob draws them.
std::vector<float> logit_row(std::int64_t count, std::uint64_t row) {
  std::vector<float> values;
  for (std::int64_t v = 0; v < count; ++v) {
    values.push_back(round_to(
        DType::bf16,
        4.0f * counter_uniform(7, hash_name("tp_ops/logits"), row, static_cast<std::uint64_t>(v))));
  }
  return values;
}

}  // namespace

TEST_CASE("ordered_max: the max of a row depends on its values alone", "[tp][vocab]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(bits_of(ordered_max(-0.0f, 0.0f)) == bits_of(0.0f));
  CHECK(bits_of(ordered_max(0.0f, -0.0f)) == bits_of(0.0f));
  CHECK(ordered_max(nan, -3.0f) == -3.0f);
  CHECK(ordered_max(-3.0f, nan) == -3.0f);
  CHECK(ordered_max(2.0f, 5.0f) == 5.0f);
  // Every split of a row into two rank shares, combined in either order, gives the same bits: the
  // larger value, +0 over -0, a NaN passed over.
  const float low = -std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::vector<float>, float>> rows = {
      {{-0.0f, 1.5f, nan, 0.0f, 1.5f, -7.0f, nan, 0.25f}, 1.5f},
      {{-0.0f, nan, -7.0f, 0.0f, -0.0f, -1.0f}, 0.0f},
  };
  for (const auto& [row, expected] : rows) {
    for (std::size_t cut = 0; cut <= row.size(); ++cut) {
      float left = low, right = low;
      for (std::size_t i = 0; i < cut; ++i) left = ordered_max(left, row[i]);
      for (std::size_t i = cut; i < row.size(); ++i) right = ordered_max(right, row[i]);
      CHECK(bits_of(ordered_max(left, right)) == bits_of(expected));
      CHECK(bits_of(ordered_max(right, left)) == bits_of(expected));
    }
  }
}

TEST_CASE("vocab_parallel_softmax: fixed chunks give the same bits at every tp, the rank chain not",
          "[tp][vocab]") {
  const std::int64_t vocab = 1024;
  int rows_where_chain_moved = 0;
  for (std::uint64_t r = 0; r < 32; ++r) {
    const std::vector<float> row = logit_row(vocab, r);
    const VocabSoftmax at_one =
        vocab_parallel_softmax(row, SplitOrder::fixed_chunks, 1, DType::bf16, 0, 1);
    for (int tp : {2, 4, 8}) {
      const VocabSoftmax split =
          vocab_parallel_softmax(row, SplitOrder::fixed_chunks, tp, DType::bf16, 0, 1);
      CHECK(bits_of(split.max) == bits_of(at_one.max));
      CHECK(bits_of(split.log_sum) == bits_of(at_one.log_sum));
    }
    const float chain_one =
        vocab_parallel_softmax(row, SplitOrder::rank_chain, 1, DType::bf16, 0, 1).log_sum;
    const float chain_four =
        vocab_parallel_softmax(row, SplitOrder::rank_chain, 4, DType::bf16, 0, 1).log_sum;
    rows_where_chain_moved += bits_of(chain_one) != bits_of(chain_four);
    // The statistics are those of a softmax: log(sum of exp(x - max)) within fp32 order error.
    double sum = 0;
    for (float x : row) sum += std::exp(static_cast<double>(x) - at_one.max);
    CHECK(at_one.log_sum == Approx(std::log(sum)).epsilon(1e-6));
  }
  // The control of this test: another association of the same sum changes the bits of some rows.
  CHECK(rows_where_chain_moved > 0);
}

TEST_CASE("head-parallel attention: a rank's case holds H / tp heads and KVH / tp KV heads",
          "[tp][attention]") {
  CaseSpec spec =
      case_support::make_case("attention", "cpu-tp-heads-fixed-order", DType::bf16, Pass::forward,
                              {{"H", 8}, {"KVH", 2}, {"D", 16}, {"L", 40}}, 3, 1);
  spec.tp = 2;
  const CaseSpec rank = attention::rank_spec(spec, 2);
  CHECK(rank.dim("H") == 4);
  CHECK(rank.dim("KVH") == 1);
  CHECK(rank.dim("D") == 16);
  CHECK(rank.tp == 1);
  const Impl* impl =
      case_support::world().registry.find_impl("attention", "cpu-tp-heads-fixed-order");
  REQUIRE(impl != nullptr);
  const TensorParallelism parallelism = impl->tensor_parallelism();
  CHECK(parallelism.split_dims == std::vector<std::string>{"H", "KVH"});
  CHECK(parallelism.across_tp == TensorParallelism::AcrossTp::claimed);
  CHECK(parallelism.split_problem({{"H", 8}, {"KVH", 2}}, 4).has_value());
  CHECK_FALSE(parallelism.split_problem({{"H", 8}, {"KVH", 2}}, 2).has_value());
}

TEST_CASE("embedding: an id outside the vocabulary is refused naming the id and the slot",
          "[tp][embedding]") {
  CaseSpec spec = case_support::make_case("embedding", "cpu-tp-vocab-fixed-order", DType::bf16,
                                          Pass::forward, {{"V", 50}, {"H", 8}}, 2, 1);
  Invocation invocation{{0, 1}, {}};
  Batch batch;
  batch.spec = &spec;
  batch.invocation = &invocation;
  batch.inputs["ids"] =
      std::make_shared<const Tensor>(case_support::from_bits(DType::i32, 2, {7, 50}));
  CHECK(checked_token_id(batch, 0) == 7);
  CHECK_THROWS_WITH(checked_token_id(batch, 1),
                    "embedding: token id 50 at slot 1 is out of range [0, 50)");
}
