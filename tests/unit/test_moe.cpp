// moe on the CPU backend: the routing's tie rule (NaN and equal logits) and weights, the skew
// option's hot experts, the FP32 reference against a direct double-precision computation (forward)
// and its finite differences (backward), cpu-fixed-order passing every layout, each CPU control
// drifting where it models a failure, special values, and bad shapes as bad input naming the dim.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "moe/moe.h"
#include "moe/moe_routing.h"
#include "spec/spec.h"
#include "unit/case_support.h"

using namespace bitcheck;
using case_support::describe;
using case_support::world;

namespace {

const Dims small_shape = {{"H", 16}, {"I", 8}, {"E", 8}, {"topk", 3}};
const Dims skewed_shape = {{"H", 16}, {"I", 8}, {"E", 16}, {"topk", 4}, {"hot_experts", 2}};

CaseSpec moe_case(const std::string& impl, DType dtype, Pass pass, const Dims& dims,
                  std::int64_t rows) {
  return case_support::make_case("moe", impl, dtype, pass, dims, rows, 5);
}

CaseResult run(const CaseSpec& spec, CaseArtifacts* artifacts = nullptr) {
  Runner runner(world().registry, world().contract);
  return runner.run_case(spec, artifacts);
}

// A small case's inputs, with distinct logits so the routing is far from any tie: H = I = E = 8,
// topk 3, two tokens.
struct SmallCase {
  static constexpr std::int64_t hidden = 8, inter = 8, experts = 8, topk = 3, rows = 2;
  std::map<std::string, Tensor> inputs;
  SmallCase() {
    auto fill = [](std::vector<std::int64_t> shape, double phase, double scale) {
      Tensor tensor(DType::fp32, std::move(shape));
      for (std::int64_t i = 0; i < tensor.numel(); ++i)
        tensor.set(i, static_cast<float>(scale * std::sin(phase + 1.7 * static_cast<double>(i))));
      return tensor;
    };
    inputs["x"] = fill({rows, hidden}, 0.3, 1.0);
    inputs["dy"] = fill({rows, hidden}, 1.1, 1.0);
    inputs["router"] = fill({experts, hidden}, 2.0, 0.9);
    inputs["w_gate"] = fill({experts, inter, hidden}, 0.7, 0.6);
    inputs["w_up"] = fill({experts, inter, hidden}, 1.9, 0.6);
    inputs["w_down"] = fill({experts, hidden, inter}, 2.9, 0.6);
  }
  CaseSpec spec(Pass pass) const {
    return moe_case("cpu-fixed-order", DType::fp32, pass,
                    {{"H", hidden}, {"I", inter}, {"E", experts}, {"topk", topk}}, rows);
  }
  std::map<std::string, Tensor> reference(Pass pass, std::vector<std::int64_t> reduction_rows) {
    ReferenceRequest request;
    request.rows = {0, 1};
    request.reduction_rows = std::move(reduction_rows);
    std::map<std::string, Tensor> outputs;
    world().registry.find_op("moe")->reference(spec(pass), inputs, request, outputs);
    return outputs;
  }
};

double value(const std::map<std::string, Tensor>& tensors, const std::string& name,
             std::int64_t index) {
  return tensors.at(name).get(index);
}

// The layer written out directly in double: softmax over the top-k logits (chosen by sorting),
// each expert's SwiGLU MLP, the weighted sum. Returns sum(dy * y) when `loss`, else fills `y`.
double direct_forward(const std::map<std::string, Tensor>& in, std::vector<double>* y = nullptr,
                      std::vector<std::int64_t>* chosen = nullptr) {
  constexpr std::int64_t H = SmallCase::hidden, I = SmallCase::inter, E = SmallCase::experts,
                         K = SmallCase::topk;
  double loss = 0;
  for (std::int64_t t = 0; t < SmallCase::rows; ++t) {
    std::vector<std::pair<double, std::int64_t>> logits;
    for (std::int64_t e = 0; e < E; ++e) {
      double z = 0;
      for (std::int64_t h = 0; h < H; ++h)
        z += value(in, "x", t * H + h) * value(in, "router", e * H + h);
      logits.push_back({-z, e});
    }
    std::sort(logits.begin(), logits.end());
    double normalizer = 0;
    for (std::int64_t j = 0; j < K; ++j) normalizer += std::exp(-logits[j].first);
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t e = logits[j].second;
      if (chosen) chosen->push_back(e);
      const double weight = std::exp(-logits[j].first) / normalizer;
      std::vector<double> activation(I);
      for (std::int64_t i = 0; i < I; ++i) {
        double gate = 0, up = 0;
        for (std::int64_t h = 0; h < H; ++h) {
          gate += value(in, "w_gate", (e * I + i) * H + h) * value(in, "x", t * H + h);
          up += value(in, "w_up", (e * I + i) * H + h) * value(in, "x", t * H + h);
        }
        activation[i] = gate / (1 + std::exp(-gate)) * up;
      }
      for (std::int64_t h = 0; h < H; ++h) {
        double out = 0;
        for (std::int64_t i = 0; i < I; ++i)
          out += value(in, "w_down", (e * H + h) * I + i) * activation[i];
        if (y) (*y)[static_cast<std::size_t>(t * H + h)] += weight * out;
        loss += weight * out * value(in, "dy", t * H + h);
      }
    }
  }
  return loss;
}

// d loss / d input[index] by central differences of direct_forward in double.
double numeric_gradient(std::map<std::string, Tensor> inputs, const std::string& name,
                        std::int64_t index) {
  const double step = 1e-3;
  const float original = inputs.at(name).get(index);
  inputs.at(name).set(index, original + static_cast<float>(step));
  const double plus = direct_forward(inputs);
  inputs.at(name).set(index, original - static_cast<float>(step));
  const double minus = direct_forward(inputs);
  const double actual_step = (static_cast<double>(original + static_cast<float>(step)) -
                              static_cast<double>(original - static_cast<float>(step)));
  return (plus - minus) / actual_step;
}

}  // namespace

TEST_CASE("moe routing: ties go to the lowest expert, NaN ranks above every number", "[moe]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int ids[4];
  float weights[4];
  SECTION("equal logits: the lower index first, and -0 ties +0") {
    const float keys[6] = {0.5f, 2.0f, 0.5f, 2.0f, -0.0f, 0.0f};
    moe::route(keys, keys, 6, 4, ids, weights);
    CHECK(std::vector<int>(ids, ids + 4) == std::vector<int>{1, 3, 0, 2});
    CHECK(weights[0] == weights[1]);
    CHECK(weights[2] == weights[3]);
    moe::route(keys, keys, 6, 4, ids, weights);
    const float zeros[3] = {0.0f, -0.0f, 0.0f};
    moe::route(zeros, zeros, 3, 2, ids, weights);
    CHECK(std::vector<int>(ids, ids + 2) == std::vector<int>{0, 1});
  }
  SECTION("NaN first, NaNs among themselves by index; the weights are NaN") {
    const float keys[5] = {1.0f, nan, 3.0f, nan, -1.0f};
    moe::route(keys, keys, 5, 3, ids, weights);
    CHECK(std::vector<int>(ids, ids + 3) == std::vector<int>{1, 3, 2});
    CHECK(std::isnan(weights[0]));
  }
  SECTION("every logit NaN (a NaN in x): the first k experts") {
    const float keys[4] = {nan, nan, nan, nan};
    moe::route(keys, keys, 4, 2, ids, weights);
    CHECK(std::vector<int>(ids, ids + 2) == std::vector<int>{0, 1});
  }
  SECTION("the order is strict: a key never ranks before itself, ties are antisymmetric") {
    CHECK_FALSE(moe::ranks_before(nan, 2, nan, 2));
    CHECK(moe::ranks_before(nan, 1, nan, 2) != moe::ranks_before(nan, 2, nan, 1));
    CHECK(moe::ranks_before(-0.0f, 0, 0.0f, 1));
    CHECK_FALSE(moe::ranks_before(0.0f, 1, -0.0f, 0));
  }
}

TEST_CASE("moe routing: the weights are the softmax of the chosen logits, selection by the keys",
          "[moe]") {
  const float logits[5] = {0.25f, -1.0f, 1.5f, 0.75f, 0.0f};
  const float keys[5] = {0.25f, 7.0f, 1.5f, 0.75f, 0.0f};  // expert 1 biased into first place
  int ids[3];
  float weights[3];
  moe::route(keys, logits, 5, 3, ids, weights);
  REQUIRE(std::vector<int>(ids, ids + 3) == std::vector<int>{1, 2, 3});
  const double sum = std::exp(-1.0) + std::exp(1.5) + std::exp(0.75);
  CHECK(weights[0] == Approx(std::exp(-1.0) / sum).epsilon(1e-6));
  CHECK(weights[1] == Approx(std::exp(1.5) / sum).epsilon(1e-6));
  CHECK(weights[2] == Approx(std::exp(0.75) / sum).epsilon(1e-6));
}

TEST_CASE("moe skew: hot experts are spread over the indices and every token picks them", "[moe]") {
  std::vector<int> hot;
  for (int e = 0; e < 16; ++e)
    if (moe::is_hot_expert(e, 16, 2)) hot.push_back(e);
  CHECK(hot == std::vector<int>{4, 12});
  for (int experts : {8, 128, 1000}) {
    for (int count : {1, 3, 8}) {
      int found = 0;
      for (int e = 0; e < experts; ++e) found += moe::is_hot_expert(e, experts, count);
      CHECK(found == count);
    }
  }
  CaseArtifacts artifacts;
  CaseResult result =
      run(moe_case("cpu-fixed-order", DType::bf16, Pass::forward, skewed_shape, 40), &artifacts);
  INFO(describe(result));
  REQUIRE(result.verdict == Verdict::pass);
  const Tensor& ids = artifacts.layout_outputs.at("batch").at("topk_ids");
  std::map<std::int32_t, std::int64_t> load;
  for (std::int64_t i = 0; i < ids.numel(); ++i) ++load[ids.get_int(i)];
  CHECK(load[4] == 40);  // every token on each hot expert
  CHECK(load[12] == 40);
  // Unskewed, the same tokens spread: no expert takes them all.
  Dims uniform = skewed_shape;
  uniform.erase("hot_experts");
  CaseArtifacts spread;
  run(moe_case("cpu-fixed-order", DType::bf16, Pass::forward, uniform, 40), &spread);
  std::map<std::int32_t, std::int64_t> spread_load;
  const Tensor& spread_ids = spread.layout_outputs.at("batch").at("topk_ids");
  for (std::int64_t i = 0; i < spread_ids.numel(); ++i) ++spread_load[spread_ids.get_int(i)];
  for (const auto& [expert, tokens] : spread_load) CHECK(tokens < 40);
}

TEST_CASE("moe reference forward equals the layer computed directly in double", "[moe]") {
  SmallCase small;
  std::vector<double> expected(SmallCase::rows * SmallCase::hidden, 0.0);
  std::vector<std::int64_t> chosen;
  direct_forward(small.inputs, &expected, &chosen);
  std::map<std::string, Tensor> outputs = small.reference(Pass::forward, {});
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("y[" << i << "]");
    CHECK(value(outputs, "y", static_cast<std::int64_t>(i)) ==
          Approx(expected[i]).epsilon(1e-5).margin(1e-6));
  }
  for (std::size_t i = 0; i < chosen.size(); ++i)
    CHECK(value(outputs, "topk_ids", static_cast<std::int64_t>(i)) ==
          static_cast<double>(chosen[i]));
}

TEST_CASE("moe reference backward is the gradient of sum(dy * y) (finite differences)", "[moe]") {
  SmallCase small;
  std::map<std::string, Tensor> grads = small.reference(Pass::backward, {0, 1, 2, 3, 4, 5, 6, 7});
  auto check = [&](const std::string& gradient, const std::string& input, std::int64_t index) {
    INFO(gradient << "[" << index << "]");
    CHECK(value(grads, gradient, index) ==
          Approx(numeric_gradient(small.inputs, input, index)).epsilon(2e-3).margin(2e-4));
  };
  for (std::int64_t i = 0; i < SmallCase::rows * SmallCase::hidden; i += 3) check("dx", "x", i);
  // The reductions' rows are the experts 0..7 in order, as requested.
  for (std::int64_t i = 0; i < SmallCase::experts * SmallCase::hidden; i += 5)
    check("drouter", "router", i);
  const std::int64_t slab = SmallCase::experts * SmallCase::inter * SmallCase::hidden;
  for (std::int64_t i = 0; i < slab; i += 37) {
    check("dw_gate", "w_gate", i);
    check("dw_up", "w_up", i);
    check("dw_down", "w_down", i);
  }
}

TEST_CASE("moe cpu-fixed-order passes every layout, forward and backward, in every dtype",
          "[moe]") {
  for (const Dims& dims : {small_shape, skewed_shape}) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        for (std::int64_t rows : {1, 7, 33}) {
          CaseResult result = run(moe_case("cpu-fixed-order", dtype, pass, dims, rows));
          INFO(dims_string(dims) << " " << to_string(dtype) << " " << to_string(pass)
                                 << " M=" << rows << ": " << describe(result));
          CHECK(result.verdict == Verdict::pass);
          CHECK(result.layouts_run.size() == known_layouts().size());
        }
      }
    }
  }
}

TEST_CASE("moe CPU controls drift where they model a failure, in every dtype", "[moe][control]") {
  struct Expected {
    const char* impl;
    Pass pass;
    const char* tensor;  // the output the drift shows in
  };
  for (const Expected& expected : {Expected{"cpu-split-k-by-load", Pass::forward, "y"},
                                   Expected{"cpu-split-k-by-load", Pass::backward, "dx"},
                                   Expected{"cpu-arrival-order-combine", Pass::forward, "y"},
                                   Expected{"cpu-arrival-order-combine", Pass::backward, "dx"},
                                   Expected{"cpu-arrival-order-dw", Pass::backward, "dw_gate"}}) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      CaseResult result = run(moe_case(expected.impl, dtype, expected.pass, skewed_shape, 33));
      INFO(expected.impl << " " << to_string(dtype) << " " << to_string(expected.pass) << ": "
                         << describe(result));
      REQUIRE(result.verdict == Verdict::drift);
      std::set<std::string> tensors;
      for (const auto& drift : result.drift) tensors.insert(drift.tensor);
      CHECK(tensors.count(expected.tensor) == 1);
      CHECK(tensors.count("topk_ids") == 0);  // the routing itself is the same in each
    }
  }
  // The dW control's forward is the fixed order's.
  CHECK(
      run(moe_case("cpu-arrival-order-dw", DType::bf16, Pass::forward, skewed_shape, 33)).verdict ==
      Verdict::pass);
}

TEST_CASE("moe split-K control: its switch point is the load, and the batch crosses it",
          "[moe][paths]") {
  Impl* impl = world().registry.find_impl("moe", "cpu-split-k-by-load");
  REQUIRE(impl != nullptr);
  const std::vector<SwitchPoint> points = impl->switch_points(
      moe_case("cpu-split-k-by-load", DType::bf16, Pass::forward, skewed_shape, 1), 64);
  REQUIRE(points.size() == 1);
  CHECK(points[0].rows == 4);
  CHECK(points[0].from == "expert.split-k");
  CHECK(points[0].to == "expert.whole");
  CaseResult result =
      run(moe_case("cpu-split-k-by-load", DType::bf16, Pass::forward, skewed_shape, 4));
  // Alone every expert has one token; in the batch the hot experts have all four.
  CHECK(result.paths.at("alone") == std::vector<std::string>{"expert.split-k"});
  CHECK(result.paths.at("batch") == std::vector<std::string>{"expert.split-k", "expert.whole"});
  CHECK(result.verdict == Verdict::drift);
  // The fixed order never splits: the same batch of four tokens passes.
  CHECK(run(moe_case("cpu-fixed-order", DType::bf16, Pass::forward, skewed_shape, 4)).verdict ==
        Verdict::pass);
}

TEST_CASE("moe with special values: NaN and Inf rows stay invariant and match the reference",
          "[moe][special_values]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseSpec spec = moe_case("cpu-fixed-order", DType::bf16, pass, small_shape, 33);
    spec.special_values = 1.0 / 16;
    CaseResult result = run(spec);
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::pass);
    std::int64_t matched = 0;
    for (const auto& accuracy : result.accuracy) matched += accuracy.nonfinite_matched;
    CHECK(matched > 0);  // some rows really carried NaN or Inf through
  }
}

TEST_CASE("moe shapes the op cannot mean are bad input naming the dim", "[moe][spec]") {
  struct Bad {
    const char* shape;
    const char* dim;
    const char* expected;
  };
  for (const Bad& bad : {
           Bad{R"({"H": 16, "I": 8, "E": 8, "topk": 9})", "topk", "at most E (8)"},
           Bad{R"({"H": 12, "I": 8, "E": 8, "topk": 2})", "H", "a multiple of 8"},
           Bad{R"({"H": 16, "I": 20, "E": 8, "topk": 2})", "I", "a multiple of 8"},
           Bad{R"({"H": 16, "I": 8, "E": 2048, "topk": 2})", "E", "at most 1024"},
           Bad{R"({"H": 16, "I": 8, "E": 8, "topk": 2, "hot_experts": 3})", "hot_experts",
               "at most topk (2)"},
           Bad{R"({"H": 16, "I": 8, "E": 8, "topk": 2, "hot_experts": -1})", "hot_experts",
               "an integer in [0,"},
       }) {
    const nlohmann::json document = nlohmann::json::parse(
        std::string(R"({"schema_version": 1, "ops": {"moe": {"shapes": [)") + bad.shape + "]}}}");
    INFO(bad.shape);
    try {
      parse_sweep_spec(document, "bad.json", world().registry, world().contract);
      FAIL("no BadInput");
    } catch (const BadInput& error) {
      CHECK(error.file() == "bad.json");
      CHECK(error.json_path() == std::string("$.ops.moe.shapes[0].") + bad.dim);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
    }
  }
  // hot_experts is optional, and 0 is the same shape as leaving it out.
  const nlohmann::json ok = nlohmann::json::parse(
      R"({"schema_version": 1, "ops": {"moe": {"shapes": [{"H": 16, "I": 8, "E": 8, "topk": 2,
          "hot_experts": 0}, {"H": 16, "I": 8, "E": 8, "topk": 2}]}}})");
  SweepSpec spec = parse_sweep_spec(ok, "ok.json", world().registry, world().contract);
  REQUIRE(spec.ops.size() == 1);
  CHECK(spec.ops[0].shapes[0] == spec.ops[0].shapes[1]);
}

TEST_CASE("the sweeps that run moe parse and name it", "[moe][spec]") {
  // Specs that name CUDA impls (of moe or of other ops) parse where those are registered.
  const bool cuda = world().registry.find_impl("moe", "fixed-order") != nullptr;
  const std::vector<std::pair<const char*, bool>> specs = {{"moe.json", false},
                                                           {"moe-gpu.json", false},
                                                           {"bench-moe.json", true},
                                                           {"gpu.json", true},
                                                           {"nightly-gpu.json", true}};
  for (const auto& [file, names_cuda_impls] : specs) {
    if (names_cuda_impls && !cuda) continue;
    INFO(file);
    const SweepSpec spec = load_sweep_spec(std::string(BITCHECK_SOURCE_DIR) + "/sweeps/" + file,
                                           world().registry, world().contract);
    bool moe = false;
    for (const OpSweep& sweep : spec.ops) moe = moe || sweep.op == "moe";
    CHECK(moe);
  }
}
