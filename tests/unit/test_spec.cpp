// Sweep specs: the embedded default parses; every bad spec or command-line override is BadInput
// with file, JSON path and expectation; expansion is the cartesian product; an out-of-scope dtype
// expands to cases the runner skips with the contract's reason.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "core/json_input.h"
#include "manifest.h"
#include "run/runner.h"
#include "spec/contract.h"
#include "spec/spec.h"

using namespace bitcheck;

namespace {

const std::string data_dir = std::string(BITCHECK_SOURCE_DIR) + "/tests/data/";

struct World {
  Registry registry;
  Contract contract;
  World() {
    register_all(registry);
    contract = load_embedded_contract(registry);
  }
};

struct BadSpec {
  const char* file;
  const char* json_path;
  const char* expected;
};

}  // namespace

TEST_CASE("the embedded default spec parses and names every registered op", "[spec]") {
  World world;
  SweepSpec spec = load_embedded_sweep_spec(world.registry, world.contract);
  CHECK(spec.source == "embedded:sweeps/default.json");
  REQUIRE_FALSE(spec.ops.empty());
  std::set<std::string> ops;
  for (const auto& sweep : spec.ops) {
    ops.insert(sweep.op);
    CHECK_FALSE(sweep.shapes.empty());
    CHECK_FALSE(sweep.batches.empty());
    CHECK(sweep.repeats >= 2);
  }
  for (const OpDef* op : world.registry.ops()) CHECK(ops.count(op->name) == 1);

  // The on-disk copy is the same spec.
  SweepSpec on_disk = load_sweep_spec(std::string(BITCHECK_SOURCE_DIR) + "/sweeps/default.json",
                                      world.registry, world.contract);
  REQUIRE(on_disk.ops.size() == spec.ops.size());
  for (std::size_t i = 0; i < spec.ops.size(); ++i) {
    CHECK(on_disk.ops[i].op == spec.ops[i].op);
    CHECK(on_disk.ops[i].shapes == spec.ops[i].shapes);
    CHECK(on_disk.ops[i].batches == spec.ops[i].batches);
  }
}

TEST_CASE("a spec expands to the cartesian product of its axes", "[spec]") {
  World world;
  SweepSpec spec = load_sweep_spec(data_dir + "spec_small.json", world.registry, world.contract);
  REQUIRE(spec.ops.size() == 2);
  const OpSweep& matmul = spec.ops[0];
  const OpSweep& rmsnorm = spec.ops[1];
  CHECK(matmul.op == "matmul");
  CHECK(matmul.dtypes == std::vector<std::string>{"bf16"});           // from defaults
  CHECK(rmsnorm.dtypes == std::vector<std::string>{"fp32", "bf16"});  // per-op override
  CHECK(rmsnorm.layouts == std::vector<std::string>{"alone", "batch", "pad_left"});
  CHECK(matmul.layouts.size() == 7);  // default: every layout
  CHECK(matmul.seeds == std::vector<std::uint64_t>{1, 2});

  SweepOverrides overrides;
  overrides.backend = "cpu";
  std::vector<CaseSpec> cases = expand_cases(spec, world.registry, overrides);
  std::size_t cpu_rmsnorm_impls = 0;
  for (Impl* impl : world.registry.impls("rmsnorm"))
    cpu_rmsnorm_impls += impl->backend() == "cpu" ? 1 : 0;
  // matmul: 1 impl x 1 dtype x 2 passes x 1 shape x 2 batches x 2 seeds
  // rmsnorm: impls x 2 dtypes x 2 passes x 2 shapes x 2 batches x 2 seeds
  CHECK(cases.size() == 8 + cpu_rmsnorm_impls * 32);
  std::set<std::string> ids;
  for (const auto& c : cases) {
    CHECK(ids.insert(c.id()).second);  // every case distinct
    CHECK(c.repeats == 2);
    CHECK(world.registry.find_impl(c.op, c.impl)->backend() == "cpu");
  }
  CHECK(cases.front().id() == "matmul/cpu-fixed-order/bf16/forward/K=16,N=8/M=1/seed=1");

  SweepOverrides only_backward = overrides;
  only_backward.passes = {"backward"};
  only_backward.batches = {4};
  only_backward.ops = {"rmsnorm"};
  SweepSpec filtered = apply_overrides(spec, only_backward, world.registry, world.contract);
  REQUIRE(filtered.ops.size() == 1);
  for (const auto& c : expand_cases(filtered, world.registry, only_backward)) {
    CHECK(c.op == "rmsnorm");
    CHECK(c.pass == Pass::backward);
    CHECK(c.rows == 4);
  }
}

TEST_CASE("the options --pass and --dtype narrow each entry and never duplicate a case", "[spec]") {
  World world;
  // Two entries over one shape, one forward-only and one backward-only, the second bf16 only (as
  // sweeps/gpu.json's matmul and matmul-backward): --pass forward keeps only the first; --dtype
  // fp16 drops the bf16-only entry; --batch giving both entries the same M still runs each case
  // once.
  nlohmann::json document = {
      {"schema_version", 1},
      {"defaults", {{"dtypes", {"bf16", "fp16"}}, {"batches", {1, 3}}}},
      {"ops",
       {{"matmul", {{"passes", {"forward"}}, {"shapes", {{{"N", 8}, {"K", 16}}}}}},
        {"matmul-backward",
         {{"op", "matmul"},
          {"passes", {"backward"}},
          {"dtypes", {"bf16"}},
          {"shapes", {{{"N", 8}, {"K", 16}}}}}}}}};
  SweepSpec spec = parse_sweep_spec(document, "narrowing.json", world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  overrides.impls = {"cpu-fixed-order"};

  SweepOverrides forward = overrides;
  forward.passes = {"forward"};
  auto forward_cases = expand_cases(apply_overrides(spec, forward, world.registry, world.contract),
                                    world.registry, forward);
  CHECK(forward_cases.size() == 4);  // 2 dtypes x 2 batches, from the forward entry only
  for (const auto& c : forward_cases) CHECK(c.pass == Pass::forward);

  SweepOverrides fp16 = overrides;
  fp16.dtypes = {"fp16"};
  auto fp16_cases = expand_cases(apply_overrides(spec, fp16, world.registry, world.contract),
                                 world.registry, fp16);
  CHECK(fp16_cases.size() == 2);  // the backward entry runs bf16 only
  for (const auto& c : fp16_cases) CHECK((c.dtype_name == "fp16" && c.pass == Pass::forward));

  SweepOverrides backward_fp16 = overrides;
  backward_fp16.dtypes = {"fp16"};
  backward_fp16.passes = {"backward"};
  CHECK_THROWS_AS(apply_overrides(spec, backward_fp16, world.registry, world.contract), BadInput);

  // The same entry listed twice: each case once, indices dense.
  document["ops"]["matmul-again"] = {
      {"op", "matmul"}, {"passes", {"forward"}}, {"shapes", {{{"N", 8}, {"K", 16}}}}};
  SweepSpec twice = parse_sweep_spec(document, "narrowing.json", world.registry, world.contract);
  auto cases = expand_cases(twice, world.registry, overrides);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CHECK(ids.insert(cases[i].id()).second);
    CHECK(cases[i].index == static_cast<std::int64_t>(i));
  }
  CHECK(cases.size() == 6);  // 4 forward + 2 backward (bf16)
}

TEST_CASE("unnamed passes apply to the entries that name none (bitcheck bench: the forward)",
          "[spec]") {
  World world;
  // bench-tp-matmul.json's shape: one entry names its backward (the column-parallel dX), one names
  // nothing. Before, bench forced --pass forward and the backward entry ran no case at all.
  nlohmann::json document = {
      {"schema_version", 1},
      {"defaults", {{"dtypes", {"bf16"}}, {"batches", {3}}}},
      {"ops",
       {{"matmul", {{"shapes", {{{"N", 8}, {"K", 16}}}}}},
        {"matmul-backward",
         {{"op", "matmul"}, {"passes", {"backward"}}, {"shapes", {{{"N", 16}, {"K", 8}}}}}}}}};
  SweepSpec spec = parse_sweep_spec(document, "unnamed.json", world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  overrides.impls = {"cpu-fixed-order"};
  overrides.unnamed_passes = {"forward"};
  auto cases = expand_cases(apply_overrides(spec, overrides, world.registry, world.contract),
                            world.registry, overrides);
  std::map<std::string, Pass> pass_of;
  for (const auto& c : cases) pass_of[dims_string(c.dims)] = c.pass;
  REQUIRE(cases.size() == 2);
  CHECK(pass_of.at("K=16,N=8") == Pass::forward);
  CHECK(pass_of.at("K=8,N=16") == Pass::backward);
  // Named in the spec's defaults: named for every entry.
  document["defaults"]["passes"] = {"backward"};
  SweepSpec named = parse_sweep_spec(document, "unnamed.json", world.registry, world.contract);
  for (const auto& c :
       expand_cases(apply_overrides(named, overrides, world.registry, world.contract),
                    world.registry, overrides))
    CHECK(c.pass == Pass::backward);
  // --pass still narrows.
  overrides.passes = {"forward"};
  auto narrowed = expand_cases(apply_overrides(spec, overrides, world.registry, world.contract),
                               world.registry, overrides);
  REQUIRE(narrowed.size() == 1);
  CHECK(narrowed[0].pass == Pass::forward);
}

TEST_CASE("a case two entries describe runs once with the layouts of both", "[spec]") {
  World world;
  // As the nightly's rmsnorm and rmsnorm-graph: the second entry adds the graph layout to cases
  // (same op, impl, shape, M) that the first already lists; it must not be dropped as a duplicate.
  nlohmann::json document = {{"schema_version", 1},
                             {"ops",
                              {{"rmsnorm",
                                {{"impls", {"cpu-fixed-order"}},
                                 {"dtypes", {"fp32"}},
                                 {"passes", {"forward"}},
                                 {"layouts", {"alone", "batch", "pad_left"}},
                                 {"shapes", {{{"H", 256}}}},
                                 {"batches", {1, 33}}}},
                               {"rmsnorm-graph",
                                {{"op", "rmsnorm"},
                                 {"impls", {"cpu-fixed-order"}},
                                 {"dtypes", {"fp32"}},
                                 {"passes", {"forward"}},
                                 {"layouts", {"alone", "batch", "graph"}},
                                 {"repeats", 3},
                                 {"shapes", {{{"H", 256}}}},
                                 {"batches", {33, 1000}}}}}}};
  SweepSpec spec = parse_sweep_spec(document, "merge.json", world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  auto cases = expand_cases(spec, world.registry, overrides);
  REQUIRE(cases.size() == 3);  // M = 1, 33 (both entries), 1000
  std::map<std::int64_t, const CaseSpec*> by_rows;
  for (const auto& c : cases) by_rows[c.rows] = &c;
  const std::vector<std::string> first = {"alone", "batch", "pad_left"};
  const std::vector<std::string> both = {"alone", "batch", "pad_left", "graph"};
  const std::vector<std::string> second = {"alone", "batch", "graph"};
  CHECK(by_rows.at(1)->layouts == first);
  CHECK(by_rows.at(33)->layouts == both);
  CHECK(by_rows.at(33)->repeats == 3);
  CHECK(by_rows.at(1000)->layouts == second);
}

TEST_CASE("every bad spec is BadInput naming file, JSON path and expectation", "[spec]") {
  World world;
  const std::vector<BadSpec> cases = {
      {"spec_invalid_json.json", "$", "valid JSON"},
      {"spec_unknown_op.json", "$.ops.nope", "a registered op"},
      {"spec_unknown_impl.json", "$.ops.matmul.impls[1]", "an impl of matmul"},
      {"spec_unknown_dtype.json", "$.ops.matmul.dtypes[1]", "a dtype named in the contract"},
      {"spec_zero_batch.json", "$.ops.matmul.batches[1]", "an integer in [1, 1048576], got 0"},
      {"spec_negative_batch.json", "$.defaults.batches[0]", "got -3"},
      {"spec_missing_shapes.json", "$.ops.matmul.shapes", "missing"},
      {"spec_batches_string.json", "$.defaults.batches", "or \"switch-points\""},
      {"spec_unknown_field.json", "$.ops.matmul.batch", "no such field"},
      {"spec_unknown_layout.json", "$.ops.rmsnorm.layouts[1]", "a layout"},
      {"spec_missing_dim.json", "$.ops.matmul.shapes[1].K", "missing"},
      {"spec_duplicate_key.json", "$.ops.matmul.shapes[1].N", "each key once per object"},
      {"spec_unknown_ids.json", "$.ops.embedding.ids", "\"uniform\", \"zipf\" or \"few\""},
      {"spec_ids_without_token_ids.json", "$.ops.lm_head.ids", "no token-id input"},
  };
  for (const auto& bad : cases) {
    const std::string path = data_dir + bad.file;
    INFO(bad.file);
    try {
      load_sweep_spec(path, world.registry, world.contract);
      FAIL_CHECK("spec accepted: " << bad.file);
    } catch (const BadInput& error) {
      CHECK(error.file() == path);
      CHECK(error.json_path() == bad.json_path);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
      CHECK_THAT(error.what(), Catch::Contains(path) && Catch::Contains(bad.json_path));
    }
  }
}

TEST_CASE("spec documents with bad structure are BadInput at the right path", "[spec]") {
  World world;
  struct Case {
    const char* text;
    const char* json_path;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {R"([1, 2])", "$", "an object"},
      {R"({"ops": {"matmul": {"shapes": [{"N": 8, "K": 16}]}}})", "$.schema_version", "missing"},
      {R"({"schema_version": 1, "ops": {}})", "$.ops", "at least one op"},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": []}}})", "$.ops.matmul.shapes",
       "non-empty"},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16, "H": 4}]}}})",
       "$.ops.matmul.shapes[0].H", "no such dim"},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 0, "K": 16}]}}})",
       "$.ops.matmul.shapes[0].N", "an integer in [1,"},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}], "repeats": 1}}})",
       "$.ops.matmul.repeats", "an integer in [2, 100]"},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}], "passes": ["sideways"]}}})",
       "$.ops.matmul.passes[0]", "\"forward\" or \"backward\""},
      {R"({"schema_version": 1, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}], "seeds": [-1]}}})",
       "$.ops.matmul.seeds[0]", "an integer in [0,"},
      {R"({"schema_version": 1, "defaults": {"dtypes": "fp64"}, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}]}}})",
       "$.defaults.dtypes", "a dtype named in the contract"},
      {R"({"schema_version": 1, "defaults": {"shapes": [{"N": 8}]}, "ops": {"matmul": {"shapes": [{"N": 8, "K": 16}]}}})",
       "$.defaults.shapes", "no such field"},
  };
  for (const auto& bad : cases) {
    INFO(bad.text);
    try {
      parse_sweep_spec(nlohmann::json::parse(bad.text), "inline.json", world.registry,
                       world.contract);
      FAIL_CHECK("spec accepted");
    } catch (const BadInput& error) {
      CHECK(error.file() == "inline.json");
      CHECK(error.json_path() == bad.json_path);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
    }
  }
}

TEST_CASE("an unreadable spec path is BadInput naming the path", "[spec]") {
  World world;
  try {
    load_sweep_spec("/nonexistent.json", world.registry, world.contract);
    FAIL("a missing spec loaded");
  } catch (const BadInput& error) {
    CHECK(error.file() == "/nonexistent.json");
    CHECK(error.json_path() == "$");
    CHECK_THAT(error.expected(), Catch::Contains("readable file"));
  }
}

// Defaults apply to every op, so an impl named there must exist for the ops that inherit it;
// otherwise expand_cases would dereference an impl that is not registered.
TEST_CASE("an unknown impl in the spec defaults is BadInput", "[spec]") {
  World world;
  const std::string path = data_dir + "spec_unknown_default_impl.json";
  try {
    load_sweep_spec(path, world.registry, world.contract);
    FAIL("spec with an unknown default impl accepted");
  } catch (const BadInput& error) {
    CHECK(error.file() == path);
    CHECK_THAT(error.json_path(),
               Catch::StartsWith("$.defaults.impls") || Catch::StartsWith("$.ops.matmul"));
  }
}

TEST_CASE("bad command-line overrides are BadInput naming the flag", "[spec]") {
  World world;
  SweepSpec spec = load_embedded_sweep_spec(world.registry, world.contract);
  struct Case {
    const char* flag;
    std::function<void(SweepOverrides&)> set;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"--batch", [](SweepOverrides& o) { o.batches = {0}; }, "got 0"},
      {"--batch",
       [](SweepOverrides& o) {
         o.batches = {1, -3};
       },
       "got -3"},
      {"--batch", [](SweepOverrides& o) { o.batches = {(1 << 20) + 1}; },
       "a batch size in [1, 1048576]"},
      {"--dtype", [](SweepOverrides& o) { o.dtypes = {"fp64"}; }, "got \"fp64\""},
      {"--op", [](SweepOverrides& o) { o.ops = {"nope"}; }, "got \"nope\""},
      {"--impl", [](SweepOverrides& o) { o.impls = {"nope"}; }, "got \"nope\""},
      {"--backend", [](SweepOverrides& o) { o.backend = "gpu"; }, "auto, cpu or cuda"},
      {"--pass", [](SweepOverrides& o) { o.passes = {"sideways"}; }, "forward or backward"},
      {"--layout", [](SweepOverrides& o) { o.layouts = {"zigzag"}; }, "got \"zigzag\""},
      {"--repeats", [](SweepOverrides& o) { o.repeats = 1; }, "at least 2"},
  };
  for (const auto& bad : cases) {
    SweepOverrides overrides;
    bad.set(overrides);
    INFO(bad.flag << " expecting " << bad.expected);
    try {
      apply_overrides(spec, overrides, world.registry, world.contract);
      FAIL_CHECK("override accepted");
    } catch (const BadInput& error) {
      CHECK(error.file() == "command line");
      CHECK(error.json_path() == bad.flag);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
    }
  }
}

TEST_CASE("an out-of-scope dtype expands to cases skipped with the contract's reason",
          "[spec][runner]") {
  World world;
  SweepSpec spec = load_sweep_spec(data_dir + "spec_fp8.json", world.registry, world.contract);
  std::vector<CaseSpec> cases = expand_cases(spec, world.registry, SweepOverrides{});
  REQUIRE(cases.size() == 2);
  Runner runner(world.registry, world.contract);
  bool saw_fp8 = false;
  for (const auto& c : cases) {
    CaseResult result = runner.run_case(c);
    INFO(c.id() << ": " << result.reason);
    if (c.dtype_name == "fp8") {
      saw_fp8 = true;
      CHECK(result.verdict == Verdict::skipped);
      CHECK(result.reason == *world.contract.dtype_skip_reason("fp8"));
      CHECK(result.layouts_run.empty());  // never run under another dtype
      CHECK(result.fingerprint.empty());
    } else {
      CHECK(result.verdict == Verdict::pass);
    }
  }
  CHECK(saw_fp8);

  // The same holds for an fp8 override on the command line.
  SweepOverrides overrides;
  overrides.dtypes = {"fp8"};
  SweepSpec fp8_only = apply_overrides(spec, overrides, world.registry, world.contract);
  for (const auto& c : expand_cases(fp8_only, world.registry, overrides)) {
    CHECK(runner.run_case(c).verdict == Verdict::skipped);
  }
}

TEST_CASE("shard cost: a fixed part per case plus the bytes of its tensors", "[spec][shard]") {
  World world;
  const Registry& registry = world.registry;
  CaseSpec small;
  small.op = "matmul";
  small.dtype_name = "bf16";
  small.dtype = DType::bf16;
  small.pass = Pass::forward;
  small.dims = {{"N", 64}, {"K", 64}};
  small.rows = 1;
  CaseSpec wide = small;
  wide.rows = 4096;
  CaseSpec backward = small;
  backward.pass = Pass::backward;
  const double one_row = estimated_case_cost(small, registry);
  // The fixed part dominates tiny cases: 4096 rows of a 64 x 64 product are not 4096 cases' work.
  CHECK(one_row >= 1.0);
  CHECK(estimated_case_cost(wide, registry) < 2 * one_row);
  // More bytes cost more: the backward pass adds dy, dx and an fp32 dW.
  CHECK(estimated_case_cost(backward, registry) > one_row);
  CaseSpec vocab = small;
  vocab.pass = Pass::backward;
  vocab.dims = {{"N", 128256}, {"K", 4096}};
  // 128256 x 4096 bf16 weight (0.978 GiB) and fp32 dW (1.957 GiB), plus one row of x, dy, dx.
  CHECK(estimated_case_cost(vocab, registry) == Approx(1.0 + 6.0 * 2.9355).epsilon(0.001));
}

TEST_CASE("shard cost: a chain case costs what its calls cost", "[spec][shard]") {
  World world;
  SweepSpec spec = load_embedded_sweep_spec(world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  overrides.ops = {"chain"};
  auto cases = expand_cases(apply_overrides(spec, overrides, world.registry, world.contract),
                            world.registry, overrides);
  REQUIRE_FALSE(cases.empty());
  const OpDef* chain = world.registry.find_op("chain");
  REQUIRE(chain->parts);
  const auto parts = chain->parts(cases.front());
  CHECK(parts.size() > 10);  // embedding, per layer ~11 calls, final norm, LM head, logprob
  double sum = 0;
  for (const auto& part : parts) sum += estimated_case_cost(part, world.registry);
  CHECK(estimated_case_cost(cases.front(), world.registry) == Approx(sum));
}

TEST_CASE("shards keep an input group together unless it outweighs a shard", "[spec][shard]") {
  World world;
  SweepSpec spec = load_embedded_sweep_spec(world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  overrides.ops = {"matmul", "rmsnorm", "silu"};
  SweepSpec narrowed = apply_overrides(spec, overrides, world.registry, world.contract);
  const auto all = expand_cases(narrowed, world.registry, overrides);
  // Impls of one input group are adjacent in the unsharded order.
  for (std::size_t i = 1; i + 1 < all.size(); ++i) {
    if (all[i - 1].input_group() == all[i + 1].input_group())
      CHECK(all[i].input_group() == all[i - 1].input_group());
  }
  const int shards = 3;
  std::map<std::string, std::set<int>> shards_of_group;
  std::set<std::string> ids;
  for (int s = 0; s < shards; ++s) {
    SweepOverrides one = overrides;
    one.shard_index = s;
    one.shard_count = shards;
    for (const auto& c : expand_cases(narrowed, world.registry, one)) {
      CHECK(ids.insert(c.id()).second);
      shards_of_group[c.input_group()].insert(s);
    }
  }
  CHECK(ids.size() == all.size());
  for (const auto& [group, in] : shards_of_group) {
    INFO(group);
    CHECK(in.size() == 1);  // small groups: one shard each, so one reference per group
  }

  // With more shards than a big group's share allows, the group is cut: every case still runs once.
  SweepOverrides many = overrides;
  many.shard_count = 64;
  std::set<std::string> seen;
  for (int s = 0; s < 64; ++s) {
    many.shard_index = s;
    for (const auto& c : expand_cases(narrowed, world.registry, many))
      CHECK(seen.insert(c.id()).second);
  }
  CHECK(seen.size() == all.size());
}

TEST_CASE("measured case times replace the estimates: the slowest unit first, the rest scaled",
          "[spec][shard]") {
  World world;
  SweepSpec spec = load_embedded_sweep_spec(world.registry, world.contract);
  SweepOverrides overrides;
  overrides.backend = "cpu";
  overrides.ops = {"rmsnorm", "silu"};
  SweepSpec narrowed = apply_overrides(spec, overrides, world.registry, world.contract);
  const auto cases = expand_cases(narrowed, world.registry, overrides);
  REQUIRE(cases.size() > 4);
  const std::vector<CaseUnit> estimated = case_units(cases, world.registry, 4);
  // An earlier run measured the last case at 1000 s and the first at twice its estimate.
  std::map<std::string, double> measured = {
      {cases.back().id(), 1000.0},
      {cases.front().id(), 2 * estimated_case_cost(cases.front(), world.registry)}};
  const std::vector<CaseUnit> units = case_units(cases, world.registry, 4, measured);
  auto unit_of = [&](const std::vector<CaseUnit>& list, std::size_t member) {
    for (const CaseUnit& unit : list)
      if (std::find(unit.members.begin(), unit.members.end(), member) != unit.members.end())
        return unit;
    FAIL("case " << member << " in no unit");
    return CaseUnit{};
  };
  const CaseUnit slow = unit_of(units, cases.size() - 1);
  CHECK(slow.cost >= 1000.0);
  for (const CaseUnit& unit : units) CHECK(unit.cost <= slow.cost);
  // The cases without a measurement: their estimates scaled by measured / estimated of the rest.
  const double scale = (1000.0 + 2 * estimated_case_cost(cases.front(), world.registry)) /
                       (estimated_case_cost(cases.back(), world.registry) +
                        estimated_case_cost(cases.front(), world.registry));
  // An input group with no measured case: its units (cut as the new total decides) cost its
  // estimate times that ratio.
  auto has = [](const CaseUnit& unit, std::size_t member) {
    return std::find(unit.members.begin(), unit.members.end(), member) != unit.members.end();
  };
  const CaseUnit* plain = nullptr;
  for (const CaseUnit& unit : estimated)
    if (!has(unit, 0) && !has(unit, cases.size() - 1)) plain = &unit;
  REQUIRE(plain != nullptr);
  const std::set<std::size_t> group(plain->members.begin(), plain->members.end());
  double now = 0;
  for (const CaseUnit& unit : units) {
    if (group.count(unit.members.front()) == 0) continue;
    for (std::size_t member : unit.members) CHECK(group.count(member) == 1);
    now += unit.cost;
  }
  CHECK(now == Approx(plain->cost * scale));
  // Every case still in exactly one unit.
  std::set<std::size_t> seen;
  for (const CaseUnit& unit : units)
    for (std::size_t member : unit.members) CHECK(seen.insert(member).second);
  CHECK(seen.size() == cases.size());
}
