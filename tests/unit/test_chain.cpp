// chain on the CPU backend: the decoder stack of fixed-order impls passes forward and backward in
// every sequence layout, its MLP dense or an moe layer, and each control swapped in for one op
// makes the chain drift first at exactly that op (forward order; backward order for a control that
// only breaks the backward); its reference has the same bits on one thread or several.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <set>

#include "attention/attention.h"
#include "case_support.h"
#include "chain/chain.h"
#include "core/error.h"
#include "manifest.h"
#include "report/report.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

const std::vector<std::string> chain_layouts = {"seq_alone",  "batch",           "varlen_packed",
                                                "padded",     "padded_in_order", "chunked_1",
                                                "chunked_16", "decode"};

Dims small_dims() {
  return {{"layers", 2}, {"H", 64},  {"heads", 4}, {"kv_heads", 2},
          {"D", 16},     {"I", 128}, {"V", 256},   {"L", 40}};
}

// Widths that give the elementwise controls a scalar tail (H and I not multiples of 8) and a
// vocabulary small enough that ids repeat (so the order of the embedding gradient sum matters).
Dims tail_dims() {
  return {{"layers", 2}, {"H", 60},  {"heads", 4}, {"kv_heads", 2},
          {"D", 16},     {"I", 124}, {"V", 32},    {"L", 40}};
}

// The MLP as an moe layer: 8 experts, 3 per token (H and I multiples of 8, as moe needs).
Dims moe_dims() {
  return {{"layers", 2}, {"H", 64}, {"heads", 4}, {"kv_heads", 2}, {"D", 16},
          {"I", 32},     {"V", 32}, {"L", 40},    {"E", 8},        {"topk", 3}};
}

CaseSpec chain_case(const std::string& impl, DType dtype, Pass pass, Dims dims,
                    std::uint64_t seed) {
  CaseSpec spec = case_support::make_case("chain", impl, dtype, pass, std::move(dims), 4, seed);
  spec.layouts = chain_layouts;
  return spec;
}

// The first seed whose 4 sequences include a short one (< 4 tokens: the row-count controls split
// it when it runs alone, not when packed) and a long one (> 32 tokens: the KV-block and split-KV
// controls change the order of its keys).
std::uint64_t revealing_seed(const Dims& dims) {
  for (std::uint64_t seed = 1; seed < 1000; ++seed) {
    std::vector<std::int64_t> lengths = attention::sequence_lengths(
        chain_case("cpu-fixed-order", DType::bf16, Pass::forward, dims, seed));
    bool short_one =
        std::any_of(lengths.begin(), lengths.end(), [](std::int64_t n) { return n < 4; });
    bool long_one =
        std::any_of(lengths.begin(), lengths.end(), [](std::int64_t n) { return n > 32; });
    if (short_one && long_one) return seed;
  }
  FAIL("no seed below 1000 gives both a short and a long sequence");
  return 0;
}

nlohmann::json status_of(const CaseResult& result) {
  return case_entry(result, case_support::world().registry)["chain"];
}

// swiglu's fixed-order CPU impl with every output then scaled by 1 + 2^-4: as invariant as the
// impl it wraps, but 16 bf16 ulps off its reference.
class OffByASixteenth : public Impl {
 public:
  explicit OffByASixteenth(Impl& wrapped)
      : Impl(ImplInfo::invariant("cpu-test-off-by-a-sixteenth", "cpu",
                                 "test only: invariant and inaccurate")
                 .only_passes({Pass::forward})),
        wrapped_(wrapped) {}
  void run(Batch& batch) override {
    wrapped_.run(batch);
    Tensor& y = batch.out("y");
    for (std::int64_t i = 0; i < y.numel(); ++i) y.set(i, y.get(i) * 1.0625f);
  }

 private:
  Impl& wrapped_;
};

// The registry of register_all without the CUDA backend, plus that swiglu, before the chain
// composes its impls.
struct InaccurateSwigluWorld {
  Registry registry;
  Contract contract;
  InaccurateSwigluWorld() {
    register_ops_and_cpu(registry);
    registry.add_impl("swiglu", std::make_unique<OffByASixteenth>(
                                    *registry.find_impl("swiglu", "cpu-fixed-order")));
    register_chain_impls(registry);
    contract = load_embedded_contract(registry);
  }
};

// BITCHECK_REFERENCE_THREADS set while alive, unset after.
class ReferenceThreads {
 public:
  explicit ReferenceThreads(const char* count) { setenv("BITCHECK_REFERENCE_THREADS", count, 1); }
  ~ReferenceThreads() { unsetenv("BITCHECK_REFERENCE_THREADS"); }
  ReferenceThreads(const ReferenceThreads&) = delete;
  ReferenceThreads& operator=(const ReferenceThreads&) = delete;
};

// The chain's reference along a case's batch-layout trajectory, at `threads` threads.
std::map<std::string, Tensor> chain_reference_at(const char* threads, const CaseSpec& spec,
                                                 const CaseArtifacts& artifacts) {
  ReferenceThreads scoped(threads);
  const OpDef& op = *case_support::world().registry.find_op("chain");
  std::map<std::string, Tensor> outputs;
  op.reference_along(spec, artifacts.inputs, artifacts.layout_outputs.at("batch"),
                     ReferenceRequest{artifacts.reference_rows, {}, {}}, outputs);
  return outputs;
}

}  // namespace

TEST_CASE("chain cpu-fixed-order passes every sequence layout, forward and backward", "[chain]") {
  const std::uint64_t seed = revealing_seed(small_dims());
  for (DType dtype : {DType::bf16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result =
          case_support::run(chain_case("cpu-fixed-order", dtype, pass, small_dims(), seed));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << case_support::describe(result));
      CHECK(result.verdict == Verdict::pass);
      // Every layout that applies ran: chunked prefill and decode in the forward only.
      CHECK(result.layouts_run.size() == (pass == Pass::forward ? chain_layouts.size() : 5u));
      nlohmann::json status = status_of(result);
      REQUIRE(!status.is_null());
      CHECK(status["first_failing_forward"].is_null());
      CHECK(status["first_failing_backward"].is_null());
      // Every call reported, in execution order.
      std::vector<chain::Call> calls = chain::calls(result.spec);
      REQUIRE(status["ops"].size() == calls.size());
      for (std::size_t i = 0; i < calls.size(); ++i) {
        CHECK(status["ops"][i]["call"] == calls[i].name);
        CHECK(status["ops"][i]["op"] == calls[i].op);
        CHECK(status["ops"][i]["status"] == "pass");
      }
    }
  }
}

TEST_CASE("chain calls run in execution order, the backward in reverse", "[chain]") {
  CaseSpec spec = chain_case("cpu-fixed-order", DType::bf16, Pass::backward, small_dims(), 1);
  std::vector<chain::Call> calls = chain::calls(spec);
  std::vector<std::string> names;
  for (const auto& call : calls) names.push_back(call.name);
  auto at = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  CHECK(names.front() == "embed");
  CHECK(at("l0.attn_norm") < at("l0.qkv"));
  CHECK(at("l0.mlp_resid") < at("l1.attn_norm"));
  CHECK(at("logprob") < at("bwd.logprob"));
  CHECK(at("bwd.l1.down") < at("bwd.l0.down"));
  CHECK(names.back() == "bwd.embed");
  CHECK(calls[static_cast<std::size_t>(at("l1.qkv"))].dims == Dims{{"N", 128}, {"K", 64}});
  CHECK(chain::layer_of("bwd.l1.down") == 1);
  CHECK(chain::layer_of("final_norm") == -1);
  CHECK(chain::op_of_call("bwd.l0.attn_branch") == "residual_add");
}

TEST_CASE("each control swapped into the chain makes it fail first at that op", "[chain]") {
  std::vector<Impl*> controls;
  for (Impl* impl : case_support::world().registry.impls("chain")) {
    // The chain at tp = P has its own control (tests/cli/test_cli_tp_chain.cpp).
    if (impl->backend() == "cpu" && !impl->claims_invariance() &&
        impl->tensor_parallelism().max_tp == 1)
      controls.push_back(impl);
  }
  // Every CPU control of every op the chain composes has its swap.
  std::size_t expected = 0;
  for (const char* op : {"embedding", "rmsnorm", "matmul", "rope", "attention", "residual_add",
                         "swiglu", "lm_head", "logprob", "moe"}) {
    for (Impl* impl : case_support::world().registry.impls(op))
      expected += impl->backend() == "cpu" && !impl->claims_invariance() &&
                  impl->tensor_parallelism().max_tp == 1;
  }
  REQUIRE(controls.size() == expected);
  for (Impl* control : controls) {
    const std::string swapped = chain::swapped_op(control->name());
    // moe's controls swap into a chain whose MLP is an moe layer; the others into a dense one.
    const Dims dims = swapped == "moe" ? moe_dims() : tail_dims();
    const std::uint64_t seed = revealing_seed(dims);
    for (Pass pass : {Pass::forward, Pass::backward}) {
      if (!control->supports(pass)) continue;
      for (DType dtype : {DType::bf16, DType::fp32}) {
        CaseResult result = case_support::run(chain_case(control->name(), dtype, pass, dims, seed));
        nlohmann::json status = status_of(result);
        INFO(control->name() << " " << to_string(dtype) << " " << to_string(pass) << ": "
                             << case_support::describe(result) << "\n"
                             << status.dump());
        if (result.verdict == Verdict::skipped) {
          // Only a 16-bit dtype that absorbs the control's effect, with the reason.
          CHECK(dtype == DType::bf16);
          CHECK(result.reason.find("checked in fp32") != std::string::npos);
          continue;
        }
        REQUIRE(!status.is_null());
        if (!control->expected_to_drift(pass)) {
          CHECK(result.verdict == Verdict::pass);
          continue;
        }
        CHECK(result.verdict == Verdict::drift);
        CHECK(status["swapped_op"] == swapped);
        CHECK(status["localized"] == true);
        const nlohmann::json& forward = status["first_failing_forward"];
        if (!forward.is_null()) {
          CHECK(forward["op"] == swapped);
          // The first call of that op in the forward: nothing before it drifts.
          for (const auto& entry : status["ops"]) {
            if (entry["call"] == forward["call"]) break;
            CHECK(entry["status"] == "pass");
          }
          continue;
        }
        // A control that only breaks the backward: the forward holds, the backward fails first
        // there.
        CHECK(pass == Pass::backward);
        REQUIRE(!status["first_failing_backward"].is_null());
        CHECK(status["first_failing_backward"]["op"] == swapped);
        CHECK(status["first_failing_backward"].contains("first_drift"));
      }
    }
  }
}

TEST_CASE("an elementwise control swap is skipped where the chain's rows leave it no tail",
          "[chain]") {
  CaseResult result =
      case_support::run(chain_case("cpu-fixed-order+residual_add=cpu-tail-downcast-bf16",
                                   DType::bf16, Pass::forward, small_dims(), 1));
  CHECK(result.verdict == Verdict::skipped);
  CHECK(result.reason.find("multiple of 8") != std::string::npos);
}

TEST_CASE("the chain report names the first failing op with its layer, tensor and drift metrics",
          "[chain]") {
  const std::uint64_t seed = revealing_seed(small_dims());
  CaseResult result =
      case_support::run(chain_case("cpu-fixed-order+rmsnorm=cpu-split-row-small-batch", DType::bf16,
                                   Pass::forward, small_dims(), seed));
  REQUIRE(result.verdict == Verdict::drift);
  nlohmann::json status = status_of(result);
  const nlohmann::json& failing = status["first_failing_forward"];
  CHECK(failing["call"] == "l0.attn_norm");
  CHECK(failing["op"] == "rmsnorm");
  CHECK(failing["layer"] == 0);
  CHECK(failing["first_drift"]["tensor"] == "l0.attn_norm.y");
  CHECK(failing["first_drift"]["mismatch_count"].get<std::int64_t>() > 0);
  CHECK(failing["first_drift"]["max_abs_diff"].get<double>() > 0);
  CHECK(status["ops"][0]["status"] == "pass");  // the embedding before it holds
  std::vector<std::string> lines = chain::failing_op_lines(status);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find(
            "forward: first failing op l0.attn_norm (rmsnorm, layer 0) drift in l0.attn_norm.y") ==
        0);
  CHECK(lines[1] == "backward: first failing op none");
}

TEST_CASE("each chain call is held to its own op's contract on the inputs the impl gave it",
          "[chain]") {
  // The wrong swiglu is the only inaccurate call: every call downstream of it is checked against
  // its own reference on the (wrong) values it was given, so it passes.
  InaccurateSwigluWorld world;
  CaseSpec spec = chain_case("cpu-fixed-order+swiglu=cpu-test-off-by-a-sixteenth", DType::bf16,
                             Pass::forward, small_dims(), 1);
  Runner runner(world.registry, world.contract);
  CaseResult result = runner.run_case(spec);
  INFO(case_support::describe(result));
  REQUIRE(result.verdict == Verdict::inaccurate);
  for (const AccuracyMetrics& accuracy : result.accuracy) {
    INFO(accuracy.tensor);
    const bool swiglu = accuracy.tensor == "l0.swiglu.y" || accuracy.tensor == "l1.swiglu.y";
    CHECK(accuracy.passed() == !swiglu);
    // Each tensor under its own op's row: swiglu's, not a chain-wide one.
    if (swiglu) CHECK(accuracy.rtol == world.contract.threshold("swiglu", "bf16", "y").rtol);
  }
  nlohmann::json status = status_of(result);
  CHECK(status["first_failing_forward"]["call"] == "l0.swiglu");
  CHECK(status["first_failing_forward"]["status"] == "inaccurate");
  CHECK(status["first_failing_forward"]["first_inaccuracy"]["tensor"] == "l0.swiglu.y");
  std::vector<std::string> lines = chain::failing_op_lines(status);
  REQUIRE(!lines.empty());
  CHECK(lines[0].find("forward: first failing op l0.swiglu (swiglu, layer 0) inaccurate in "
                      "l0.swiglu.y against its own reference: ") == 0);

  // The same chain with the right swiglu passes: the check is the wrapper's 2^-4, nothing else.
  CHECK(runner.run_case(chain_case("cpu-fixed-order", DType::bf16, Pass::forward, small_dims(), 1))
            .verdict == Verdict::pass);
}

TEST_CASE("a chain whose MLP is an moe layer passes every layout, forward and backward",
          "[chain][moe]") {
  const std::uint64_t seed = revealing_seed(moe_dims());
  for (DType dtype : {DType::bf16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      CaseResult result =
          case_support::run(chain_case("cpu-fixed-order", dtype, pass, moe_dims(), seed));
      INFO(to_string(dtype) << " " << to_string(pass) << ": " << case_support::describe(result));
      CHECK(result.verdict == Verdict::pass);
      CHECK(result.layouts_run.size() == (pass == Pass::forward ? chain_layouts.size() : 5u));
    }
  }
  // Each layer's MLP is one moe call (and its backward), with the moe's dims and weights.
  CaseSpec spec = chain_case("cpu-fixed-order", DType::bf16, Pass::backward, moe_dims(), seed);
  std::vector<std::string> names;
  for (const chain::Call& call : chain::calls(spec)) {
    names.push_back(call.name);
    if (call.name == "l1.moe")
      CHECK(call.dims == Dims{{"H", 64}, {"I", 32}, {"E", 8}, {"topk", 3}});
  }
  for (const char* name : {"l0.moe", "l1.moe", "bwd.l1.moe", "bwd.l0.moe"})
    CHECK(std::count(names.begin(), names.end(), name) == 1);
  for (const char* dense : {"l0.gate_up", "l0.swiglu", "l0.down"})
    CHECK(std::count(names.begin(), names.end(), dense) == 0);
  const OpDef& chain_op = *case_support::world().registry.find_op("chain");
  std::set<std::string> tensors;
  for (const TensorDecl& decl : chain_op.tensors(spec)) tensors.insert(decl.name);
  for (const char* name :
       {"l0.moe.router", "l0.moe.w_down", "l0.moe.topk_ids", "bwd.l0.moe.dx", "bwd.l0.moe.dw_gate"})
    CHECK(tensors.count(name) == 1);
  CHECK(chain_op.threshold_of("bwd.l0.moe.dw_gate") ==
        std::make_pair(std::string("moe"), std::string("dw_gate")));
  // A dense chain has no moe call to swap a control into: skipped, with the reason.
  CaseResult dense = case_support::run(chain_case("cpu-fixed-order+moe=cpu-split-k-by-load",
                                                  DType::bf16, Pass::forward, small_dims(), seed));
  CHECK(dense.verdict == Verdict::skipped);
  CHECK(dense.reason.find("no moe call") != std::string::npos);
}

TEST_CASE("chain moe dims the op cannot mean are bad input naming the dim", "[chain][moe]") {
  const OpDef& chain_op = *case_support::world().registry.find_op("chain");
  Dims dims = moe_dims();
  CHECK_FALSE(chain_op.dims_problem(dims));
  dims.erase("E");
  CHECK(chain_op.dims_problem(dims)->first == "topk");  // topk without experts
  dims = moe_dims();
  dims["topk"] = 9;
  CHECK(chain_op.dims_problem(dims)->first == "topk");  // more than E
  dims = moe_dims();
  dims["I"] = 36;
  CHECK(chain_op.dims_problem(dims)->first == "I");  // the moe GEMMs' tiles
  dims = small_dims();
  dims["I"] = 124;
  CHECK_FALSE(chain_op.dims_problem(dims));  // a dense chain keeps any width
}

TEST_CASE("the chain's reference computed on several threads has the serial one's bits",
          "[chain]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    INFO(to_string(pass));
    CaseSpec spec = chain_case("cpu-fixed-order", DType::bf16, pass, small_dims(), 1);
    CaseArtifacts artifacts;
    Runner runner(case_support::world().registry, case_support::world().contract);
    REQUIRE(runner.run_case(spec, &artifacts).verdict == Verdict::pass);
    const std::map<std::string, Tensor> serial = chain_reference_at("1", spec, artifacts);
    const std::map<std::string, Tensor> parallel = chain_reference_at("4", spec, artifacts);
    // Every call's outputs, rows and whole reductions, the backward's weight gradients too.
    REQUIRE(serial.size() == artifacts.reference.size());
    CHECK(serial.count(pass == Pass::forward ? "logprob.logprob" : "bwd.l0.qkv.dw") == 1);
    REQUIRE(parallel.size() == serial.size());
    for (const auto& [name, tensor] : serial) {
      INFO(name);
      REQUIRE(parallel.count(name) == 1);
      CHECK(parallel.at(name).bitwise_equal(tensor));
      CHECK(artifacts.reference.at(name).bitwise_equal(tensor));
    }
  }
}

TEST_CASE("a reference thread count that is not a count >= 1 is bad input", "[chain]") {
  CaseSpec spec = chain_case("cpu-fixed-order", DType::bf16, Pass::forward, small_dims(), 1);
  CaseArtifacts artifacts;
  Runner runner(case_support::world().registry, case_support::world().contract);
  REQUIRE(runner.run_case(spec, &artifacts).verdict == Verdict::pass);
  for (const char* count : {"0", "two", "4x", ""}) {
    INFO(count);
    CHECK_THROWS_AS(chain_reference_at(count, spec, artifacts), BadInput);
  }
}
