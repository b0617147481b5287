// What an impl is, as data (ImplInfo): what the Impl base answers from it, its defaults, and the
// identity of every registered impl (a name, a backend, a description and at least one path).
#include <catch2/catch.hpp>
#include <set>

#include "core/op.h"
#include "manifest.h"
#include "run/case_checks.h"

using namespace bitcheck;

namespace {

class NoOp : public Impl {
 public:
  using Impl::Impl;
  void run(Batch&) override {}
  // The base's dtype check, as the plugin and Python impls call it.
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    return dtype_skip_reason(spec, "test impl's");
  }
};

CaseSpec case_in(const std::string& dtype) {
  CaseSpec spec;
  spec.dtype_name = dtype;
  return spec;
}

}  // namespace

TEST_CASE("impl info: an impl that declares no path has the one path it records", "[registry]") {
  const NoOp impl(ImplInfo::invariant("plain", "cpu", "one launch path"));
  REQUIRE(impl.paths().size() == 1);
  CHECK(impl.paths()[0].name == single_path_name);
  const NoOp tiled(ImplInfo::invariant("tiled", "cpu", "two tiles")
                       .with_paths({PathDecl("tile.64", "small"), PathDecl("tile.128", "large")}));
  REQUIRE(tiled.paths().size() == 2);
  CHECK(tiled.paths()[1].name == "tile.128");
}

TEST_CASE("impl info: passes and dtypes are what the info declares", "[registry]") {
  const NoOp both(ImplInfo::control("both", "cpu", "every pass"));
  CHECK(both.supports(Pass::forward));
  CHECK(both.supports(Pass::backward));
  CHECK(both.supports_dtype("fp16"));
  CHECK_FALSE(both.skip_reason(case_in("fp16")));

  const NoOp limited(ImplInfo::invariant("limited", "cpu", "forward, 16-bit")
                         .only_passes({Pass::forward})
                         .with_dtypes({"bf16", "fp16"}));
  CHECK(limited.supports(Pass::forward));
  CHECK_FALSE(limited.supports(Pass::backward));
  CHECK(limited.supports_dtype("bf16"));
  CHECK_FALSE(limited.supports_dtype("fp32"));
  CHECK_FALSE(limited.skip_reason(case_in("bf16")));
  CHECK(limited.skip_reason(case_in("fp32")) ==
        std::optional<std::string>("dtype fp32 is not among the test impl's dtypes (bf16,fp16)"));
}

TEST_CASE("impl info: every registered impl has a name, a backend, a description and paths",
          "[registry]") {
  Registry registry;
  register_all(registry);
  for (const OpDef* op : registry.ops()) {
    std::set<std::string> names;
    for (const Impl* impl : registry.impls(op->name)) {
      INFO(op->name << "/" << impl->name());
      CHECK_FALSE(impl->name().empty());
      CHECK(names.insert(impl->name()).second);
      CHECK((impl->backend() == "cpu" || impl->backend() == "cuda"));
      CHECK_FALSE(impl->description().empty());
      CHECK_FALSE(impl->paths().empty());
      CHECK((impl->supports(Pass::forward) || impl->supports(Pass::backward)));
    }
  }
}

TEST_CASE("impl info: an impl's own bench baseline is a library default of its op with its ranks",
          "[registry][bench]") {
  ImplInfo info = ImplInfo::invariant("x", "cpu", "an impl").timed_against("x-default");
  CHECK(info.bench_baseline == "x-default");
  CHECK(ImplInfo::invariant("y", "cpu", "an impl").bench_baseline.empty());  // the op's, by default
  Registry registry;
  register_all(registry);
  for (const OpDef* op : registry.ops()) {
    for (const Impl* impl : registry.impls(op->name)) {
      const std::string& baseline = impl->info().bench_baseline;
      if (baseline.empty()) continue;
      INFO(op->name << "/" << impl->name() << " timed against " << baseline);
      const Impl* against = registry.find_impl(op->name, baseline);
      REQUIRE(against != nullptr);
      CHECK(against->is_library_default());
      CHECK(against->backend() == impl->backend());
      CHECK(against->tensor_parallelism().max_tp == impl->tensor_parallelism().max_tp);
    }
  }
}

TEST_CASE(
    "a case is held to drift by its control's passes, tp and layout, the same for every caller",
    "[registry]") {
  CaseSpec spec;
  spec.pass = Pass::forward;
  spec.layouts = {"alone", "batch"};
  const NoOp invariant(ImplInfo::invariant("plain", "cpu", "index order"));
  CHECK_FALSE(case_expected_to_drift(invariant, spec));
  const NoOp backward_only(
      ImplInfo::control("late", "cpu", "drifts in backward").drifting_in({Pass::backward}));
  CHECK_FALSE(case_expected_to_drift(backward_only, spec));
  spec.pass = Pass::backward;
  CHECK(case_expected_to_drift(backward_only, spec));
  // Built into one layout: held to drift only where the case runs it.
  const NoOp graph_only(ImplInfo::control("captured", "cpu", "a path under capture")
                            .drifting_only_in_layout("graph"));
  CHECK_FALSE(case_expected_to_drift(graph_only, spec));
  spec.layouts.push_back("graph");
  CHECK(case_expected_to_drift(graph_only, spec));
  // A ring's order matters from 3 ranks: below that it is not held to drift.
  TensorParallelism ring;
  ring.max_tp = 8;
  ring.across_tp = TensorParallelism::AcrossTp::expected_to_drift;
  ring.drifts_from_tp = 3;
  const NoOp rotating(ImplInfo::control("ring", "cpu", "rotating").on_ranks(ring));
  spec.tp = 2;
  CHECK_FALSE(case_expected_to_drift(rotating, spec));
  spec.tp = 4;
  CHECK(case_expected_to_drift(rotating, spec));
}
