// Library defaults are observations, not controls: whether cuBLASLt's heuristic drifts depends on
// the GPU, the shape and the library version, so its holding is reported, never a lost sight; a
// control (drifting by construction) that holds still is one.
#include <catch2/catch.hpp>

#include "bitcheck/op.h"
#include "bitcheck/summary.h"

using namespace bitcheck;

namespace {

CaseOutcome outcome(const std::string& impl, Verdict verdict, bool control, bool expected,
                    bool observation, const std::string& pass = "forward") {
  CaseOutcome o;
  o.id = "matmul/" + impl + "/bf16/" + pass + "/K=64,N=64/M=33/seed=1";
  o.op = "matmul";
  o.impl = impl;
  o.dtype = "bf16";
  o.pass = pass;
  o.verdict = verdict;
  o.control = control;
  o.expected_to_drift = expected;
  o.observation = observation;
  return o;
}

}  // namespace

TEST_CASE("a library default that holds is observed, not a harness failure", "[summary]") {
  const Summary summary =
      summarize({outcome("fixed-order", Verdict::pass, false, false, false),
                 outcome("cublaslt-heuristic", Verdict::pass, true, false, true),
                 outcome("cublaslt-heuristic", Verdict::pass, true, false, true, "backward"),
                 outcome("cublaslt-heuristic", Verdict::drift, true, false, true, "backward"),
                 outcome("split-k-by-rows", Verdict::drift, true, true, false)},
                {"matmul"});
  CHECK(summary.harness_failures.empty());
  CHECK(summary.exit_code == 0);
  REQUIRE(summary.observations.size() == 2);
  CHECK(summary.observations[0].pass == "backward");
  CHECK(summary.observations[0].cases == 2);
  CHECK(summary.observations[0].drifted == 1);
  CHECK(summary.observations[1].pass == "forward");
  CHECK(summary.observations[1].drifted == 0);
  REQUIRE(summary.controls.size() == 1);  // the observations are not control groups
  CHECK(summary.controls[0].impl == "split-k-by-rows");
}

TEST_CASE("a control expected to drift that holds is still a harness failure", "[summary]") {
  const Summary summary =
      summarize({outcome("split-k-by-rows", Verdict::pass, true, true, false)}, {"matmul"});
  REQUIRE(summary.harness_failures.size() == 1);
  CHECK_THAT(summary.harness_failures[0], Catch::Contains("lost its sight"));
  CHECK(summary.exit_code == 1);
  CHECK(summary.observations.empty());
}

namespace {
class LibraryDefault : public Impl {
 public:
  std::string name() const override { return "library-default"; }
  std::string backend() const override { return "cpu"; }
  bool claims_invariance() const override { return false; }
  bool is_library_default() const override { return true; }
  std::string description() const override { return "a library's default path"; }
  bool supports(Pass) const override { return true; }
  void run(Batch&) override {}
};
class Control : public LibraryDefault {
 public:
  bool is_library_default() const override { return false; }
};
}  // namespace

TEST_CASE("impls: a library default is never expected to drift, a control is", "[summary]") {
  CHECK_FALSE(LibraryDefault().expected_to_drift(Pass::forward));
  CHECK_FALSE(LibraryDefault().expected_to_drift(Pass::backward));
  CHECK(Control().expected_to_drift(Pass::forward));
  CHECK(Control().expected_to_drift(Pass::backward));
}
