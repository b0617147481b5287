// Token-id distributions (CaseSpec::ids): zipf gives many distinct ids with the frequent ones
// repeated and spread over the vocabulary, few gives a handful, uniform is today's draw bit for
// bit; a token's id depends on (seed, tensor, logical row) only, never on the batch size; the
// spec's "ids" field and --ids reach exactly the cases with token ids; the case id, input group
// and report entry name a non-uniform distribution; and embedding's dtable stays invariant under
// zipf ids while its control still drifts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "core/rng.h"
#include "core/token_ids.h"
#include "report/case_json.h"
#include "spec/spec.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::world;

namespace {

// The logical ids an embedding forward case generates (every row, in order), through the runner.
std::vector<std::int32_t> embedding_ids(IdDistribution ids, std::int64_t vocab, std::int64_t rows,
                                        std::uint64_t seed = 5) {
  CaseSpec spec = vocab_test::make_case("embedding", "cpu-fixed-order", DType::bf16, Pass::forward,
                                        {{"V", vocab}, {"H", 4}}, rows);
  spec.seed = seed;
  spec.ids = ids;
  spec.layouts = {"alone", "batch"};
  spec.alone_rows = 2;
  CaseArtifacts artifacts;
  Runner runner(world().registry, world().contract);
  CaseResult result = runner.run_case(spec, &artifacts);
  INFO(spec.id() << ": " << describe(result));
  REQUIRE(result.verdict == Verdict::pass);
  const Tensor& tensor = artifacts.inputs.at("ids");
  std::vector<std::int32_t> values;
  for (std::int64_t r = 0; r < rows; ++r) values.push_back(tensor.get_int(r));
  return values;
}

// Occurrences per id, most frequent first.
std::vector<std::int64_t> counts_descending(const std::vector<std::int32_t>& ids) {
  std::map<std::int32_t, std::int64_t> counts;
  for (std::int32_t id : ids) ++counts[id];
  std::vector<std::int64_t> sorted;
  for (const auto& entry : counts) sorted.push_back(entry.second);
  std::sort(sorted.rbegin(), sorted.rend());
  return sorted;
}

SweepSpec parse(const std::string& text) {
  return parse_sweep_spec(nlohmann::json::parse(text), "ids.json", world().registry,
                          world().contract);
}

}  // namespace

TEST_CASE("zipf ids over V = 32000: many distinct ids, the frequent ones repeated and spread",
          "[token_ids]") {
  const std::int64_t vocab = 32000, tokens = 4096;
  const std::vector<std::int32_t> ids = embedding_ids(IdDistribution::zipf, vocab, tokens);
  for (std::int32_t id : ids) {
    REQUIRE(id >= 0);
    REQUIRE(id < vocab);
  }
  const std::vector<std::int64_t> counts = counts_descending(ids);
  INFO("distinct " << counts.size() << ", top " << counts[0] << ", 10th " << counts[9]);
  CHECK(counts.size() > 500);  // many distinct ids at once
  CHECK(counts[0] > 100);      // the top id: 4096 / H(32000) = 374 expected
  CHECK(counts[0] < 600);
  CHECK(counts[9] >= 10);  // the 10 most frequent ids each repeated (37 expected for rank 10)
  std::int64_t repeated = 0;
  for (std::int64_t count : counts) repeated += count > 1 ? 1 : 0;
  CHECK(repeated > 200);

  // The frequent ids are spread over the vocabulary, not the small numbers.
  std::map<std::int32_t, std::int64_t> by_id;
  for (std::int32_t id : ids) ++by_id[id];
  std::vector<std::pair<std::int64_t, std::int32_t>> ranked;
  for (const auto& [id, count] : by_id) ranked.push_back({count, id});
  std::sort(ranked.rbegin(), ranked.rend());
  std::int32_t largest_top_id = 0;
  for (int i = 0; i < 10; ++i) largest_top_id = std::max(largest_top_id, ranked[i].second);
  CHECK(largest_top_id > vocab / 10);
}

TEST_CASE("a token's id depends on its logical row, never on the batch size", "[token_ids]") {
  for (IdDistribution distribution :
       {IdDistribution::uniform, IdDistribution::zipf, IdDistribution::few}) {
    INFO(to_string(distribution));
    const std::vector<std::int32_t> small = embedding_ids(distribution, 32000, 16);
    const std::vector<std::int32_t> large = embedding_ids(distribution, 32000, 4096);
    CHECK(std::equal(small.begin(), small.end(), large.begin()));
  }
}

TEST_CASE("uniform ids are the counter_index draw, bit for bit", "[token_ids]") {
  const std::vector<std::int32_t> ids = embedding_ids(IdDistribution::uniform, 1000, 300);
  for (std::int64_t r = 0; r < 300; ++r) {
    REQUIRE(static_cast<std::uint64_t>(ids[static_cast<std::size_t>(r)]) ==
            counter_index(5, hash_name("ids"), r, 0, 1000));
  }
}

TEST_CASE("few ids: a handful of distinct ids spread over the vocabulary", "[token_ids]") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const std::vector<std::int32_t> ids = embedding_ids(IdDistribution::few, 32000, 1000, seed);
    const std::set<std::int32_t> distinct(ids.begin(), ids.end());
    INFO("seed " << seed);
    CHECK(distinct.size() <= 8);
    CHECK(distinct.size() == few_distinct_ids);
    CHECK(*distinct.rbegin() >= 32000 * 3 / 4);  // one in each quarter of the table
    CHECK(*distinct.begin() < 32000 / 4);
  }
  // A vocabulary smaller than the handful: every id, each once.
  TokenIdSampler two(IdDistribution::few, 9, 2);
  std::set<std::uint64_t> seen;
  for (std::int64_t r = 0; r < 100; ++r) seen.insert(two.id(hash_name("ids"), r, 0));
  CHECK(seen == std::set<std::uint64_t>{0, 1});
}

TEST_CASE("zipf's rank-to-id map is a bijection of the vocabulary, seeded", "[token_ids]") {
  for (std::uint64_t vocab : {1ull, 2ull, 7ull, 8ull, 1000ull, 32000ull, 128256ull}) {
    TokenIdSampler sampler(IdDistribution::zipf, 5, vocab);
    std::vector<bool> hit(vocab, false);
    for (std::uint64_t rank = 0; rank < vocab; ++rank) {
      const std::uint64_t id = sampler.id_of_rank(rank);
      REQUIRE(id < vocab);
      REQUIRE_FALSE(hit[id]);
      hit[id] = true;
    }
  }
  // Another seed ranks the ids differently.
  TokenIdSampler one(IdDistribution::zipf, 5, 32000), other(IdDistribution::zipf, 6, 32000);
  CHECK(one.id_of_rank(0) != other.id_of_rank(0));
}

TEST_CASE("the distribution names round-trip and nothing else parses", "[token_ids]") {
  for (IdDistribution distribution :
       {IdDistribution::uniform, IdDistribution::zipf, IdDistribution::few}) {
    CHECK(parse_id_distribution(to_string(distribution)) == distribution);
  }
  CHECK_FALSE(parse_id_distribution("Zipf"));
  CHECK_FALSE(parse_id_distribution("zipfian"));
  CHECK_FALSE(parse_id_distribution(""));
}

TEST_CASE("the case id, input group and report entry name a non-uniform distribution",
          "[token_ids][report]") {
  CaseSpec spec = vocab_test::make_case("embedding", "cpu-fixed-order", DType::bf16, Pass::backward,
                                        {{"V", 1000}, {"H", 8}}, 33);
  const std::string uniform_id = spec.id(), uniform_group = spec.input_group();
  CHECK(uniform_id.find("ids=") == std::string::npos);
  spec.ids = IdDistribution::zipf;
  CHECK(spec.id() == uniform_id + "/ids=zipf");
  CHECK(spec.input_group() == uniform_group + "/ids=zipf");
  spec.special_values = 0.25;
  CHECK_THAT(spec.id(), Catch::EndsWith("/seed=5/ids=zipf/special=0.25"));

  CaseResult result;
  result.spec = spec;
  result.spec.ids = IdDistribution::few;
  nlohmann::json entry = case_to_json(result);
  CHECK(entry["ids"] == "few");
  CaseSpec back = case_spec_from_json(JsonCursor(entry, "entry"));
  CHECK(back.ids == IdDistribution::few);
  CHECK(back.id() == result.spec.id());

  result.spec.ids = IdDistribution::uniform;
  CHECK_FALSE(case_to_json(result).contains("ids"));  // absent when uniform, as before

  entry["ids"] = "zipfian";
  try {
    case_spec_from_json(JsonCursor(entry, "entry"));
    FAIL_CHECK("an unknown distribution was read");
  } catch (const BadInput& error) {
    CHECK(error.json_path() == "$.ids");
    CHECK_THAT(error.expected(), Catch::Contains("\"zipf\""));
  }
}

TEST_CASE("the spec's ids field reaches exactly the cases with token ids", "[token_ids][spec]") {
  SweepSpec spec = parse(R"({"schema_version": 1, "defaults": {"ids": "zipf", "batches": [3],
      "dtypes": ["bf16"]},
      "ops": {"embedding": {"shapes": [{"V": 100, "H": 8}]},
              "logprob": {"shapes": [{"V": 100}], "ids": "few"},
              "lm_head": {"shapes": [{"V": 100, "H": 8}]},
              "rope": {"shapes": [{"heads": 1, "head_dim": 8, "rotary_dim": 8, "style": 1}]},
              "rmsnorm": {"shapes": [{"H": 8}], "ids": "uniform"}}})");
  std::map<std::string, IdDistribution> by_op;
  for (const CaseSpec& c : expand_cases(spec, world().registry, SweepOverrides{})) {
    INFO(c.id());
    if (by_op.count(c.op)) CHECK(by_op.at(c.op) == c.ids);  // one per op here
    by_op[c.op] = c.ids;
    const bool named = c.id().find("/ids=") != std::string::npos;
    CHECK(named == (c.ids != IdDistribution::uniform));
  }
  CHECK(by_op.at("embedding") == IdDistribution::zipf);
  CHECK(by_op.at("logprob") == IdDistribution::few);
  // No token ids: the defaults' zipf leaves them uniform (rope's positions are not token ids).
  CHECK(by_op.at("lm_head") == IdDistribution::uniform);
  CHECK(by_op.at("rope") == IdDistribution::uniform);
  CHECK(by_op.at("rmsnorm") == IdDistribution::uniform);

  SECTION("--ids overrides every entry, uniform included") {
    SweepOverrides overrides;
    overrides.ids = "uniform";
    SweepSpec plain = apply_overrides(spec, overrides, world().registry, world().contract);
    for (const CaseSpec& c : expand_cases(plain, world().registry, overrides))
      CHECK(c.ids == IdDistribution::uniform);
    overrides.ids = "few";
    SweepSpec few = apply_overrides(spec, overrides, world().registry, world().contract);
    for (const CaseSpec& c : expand_cases(few, world().registry, overrides)) {
      if (c.op == "embedding" || c.op == "logprob") CHECK(c.ids == IdDistribution::few);
    }
  }
}

TEST_CASE("a bad ids value or an op without token ids is BadInput naming the field",
          "[token_ids][spec]") {
  struct Case {
    const char* text;
    const char* json_path;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {R"({"schema_version": 1, "ops": {"embedding": {"shapes": [{"V": 8, "H": 8}],
          "ids": "zipfian"}}})",
       "$.ops.embedding.ids", "\"uniform\", \"zipf\" or \"few\""},
      {R"({"schema_version": 1, "defaults": {"ids": 1},
          "ops": {"embedding": {"shapes": [{"V": 8, "H": 8}]}}})",
       "$.defaults.ids", "a string"},
      {R"({"schema_version": 1, "ops": {"lm_head": {"shapes": [{"V": 8, "H": 8}],
          "ids": "zipf"}}})",
       "$.ops.lm_head.ids", "lm_head has no token-id input"},
  };
  for (const auto& bad : cases) {
    INFO(bad.text);
    try {
      parse(bad.text);
      FAIL_CHECK("spec accepted");
    } catch (const BadInput& error) {
      CHECK(error.file() == "ids.json");
      CHECK(error.json_path() == bad.json_path);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
    }
  }

  SweepSpec spec = parse(R"({"schema_version": 1, "ops": {
      "embedding": {"shapes": [{"V": 8, "H": 8}]}, "rmsnorm": {"shapes": [{"H": 8}]}}})");
  auto override_error = [&](const std::string& ids, const std::vector<std::string>& ops) {
    SweepOverrides overrides;
    overrides.ids = ids;
    overrides.ops = ops;
    try {
      apply_overrides(spec, overrides, world().registry, world().contract);
    } catch (const BadInput& error) {
      CHECK(error.file() == "command line");
      CHECK(error.json_path() == "--ids");
      return error.expected();
    }
    return std::string("accepted");
  };
  CHECK_THAT(override_error("zipfian", {}), Catch::Contains("\"uniform\", \"zipf\" or \"few\""));
  CHECK_THAT(override_error("zipf", {"rmsnorm"}), Catch::Contains("token-id inputs"));
  CHECK(override_error("uniform", {"rmsnorm"}) == "accepted");
  CHECK(override_error("zipf", {"all"}) == "accepted");
}

TEST_CASE("embedding dtable under zipf ids: the fixed-order impl passes, its control drifts",
          "[token_ids][embedding]") {
  // 1000 tokens over V = 1000: the top id gathers ~130 tokens, hundreds of ids a few each.
  for (DType dtype : {DType::bf16, DType::fp32}) {
    CaseSpec invariant = vocab_test::make_case("embedding", "cpu-fixed-order", dtype,
                                               Pass::backward, {{"V", 1000}, {"H", 16}}, 1000);
    invariant.ids = IdDistribution::zipf;
    CaseResult result = vocab_test::run(invariant);
    INFO(invariant.id() << ": " << describe(result));
    CHECK(result.verdict == Verdict::pass);
  }
  // fp32 dout (as in test_embedding.cpp): bf16 values summed in fp32 are often exact in any
  // order, so only fp32 makes the reversed scatter of the padded layouts change bits for sure.
  CaseSpec control = vocab_test::make_case("embedding", "cpu-reverse-when-padded", DType::fp32,
                                           Pass::backward, {{"V", 1000}, {"H", 16}}, 1000);
  control.ids = IdDistribution::zipf;
  CaseResult drifted = vocab_test::run(control);
  INFO(control.id() << ": " << describe(drifted));
  REQUIRE(drifted.verdict == Verdict::drift);
  CHECK(drifted.drift.front().tensor == "dtable");
}

TEST_CASE("the nightly draws real-text ids for every op with token ids", "[token_ids][spec]") {
  // The nightly names CUDA impls (forced paths): a build without the CUDA backend cannot read it.
  if (!world().registry.find_impl("attention", "fixed-order")) {
    WARN("built without the CUDA backend: the GPU nightly spec names CUDA impls, not read here");
    return;
  }
  SweepSpec spec = load_sweep_spec(std::string(BITCHECK_SOURCE_DIR) + "/sweeps/nightly-gpu.json",
                                   world().registry, world().contract);
  std::map<std::string, std::set<IdDistribution>> by_op;
  for (const OpSweep& sweep : spec.ops) by_op[sweep.op].insert(sweep.ids);
  for (const char* op : {"embedding", "logprob", "lm_head_logprob", "chain"}) {
    INFO(op);
    CHECK(by_op.at(op).count(IdDistribution::zipf) == 1);
  }
  // V = 8 keeps uniform ids: every id repeated at every M already.
  CHECK(by_op.at("embedding").count(IdDistribution::uniform) == 1);
}
