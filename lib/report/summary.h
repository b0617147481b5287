// A run's typed summary: verdict counts over invariant impls, control groups, the first failing
// op, the status matrix, and the exit code, computed here alone.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/verdict.h"
#include "run/runner.h"

namespace bitcheck {

// What summaries and matrices need of a case, from a live result (outcome_of) or from a report's
// entry (outcome_from_json, case_json.h), so merged shards and re-read reports summarize exactly
// like a live run.
struct CaseOutcome {
  std::string id, op, impl, dtype, pass;
  int tp = 1;
  Verdict verdict = Verdict::skipped;
  bool control = false;
  bool expected_to_drift = false;
  bool observation = false;  // a library default (Impl::is_library_default)
  std::int64_t rows = 0;
  std::int64_t drift_needs_rows = 0;  // CaseResult::drift_needs_rows
};
CaseOutcome outcome_of(const CaseResult& result);

// Cell of the status matrix: op x dtype x pass, over invariant impls (controls are separate). A
// case at tp > 1 has its own row, "op tp=P" (matrix_row_name), after the op's row at tp = 1.
struct MatrixCell {
  std::map<std::string, std::int64_t> counts;  // verdict -> cases
  std::string status;                          // the most severe verdict present
};
struct StatusMatrix {
  std::vector<std::string> ops;  // execution order
  std::vector<std::string> dtypes;
  std::map<std::string, std::map<std::string, std::map<std::string, MatrixCell>>>
      cells;  // op->dtype->pass
};

// One control impl x dtype x pass expected to drift, or one library default's impl x dtype x pass
// observed (Summary::observations).
struct ControlGroup {
  std::string op, impl, dtype, pass;
  std::int64_t cases = 0, drifted = 0;
  // Cases whose batch stayed below the control's first switch point (no chance to drift), the
  // largest batch among them and the batch that switch point needs.
  std::int64_t without_chance = 0, largest_batch = 0, needs_rows = 0;
  bool lost_sight() const { return cases > without_chance && drifted == 0; }
  // The spec gave the control no case that could drift: said so, not a failure of the harness.
  bool no_chance() const { return cases > 0 && cases == without_chance && drifted == 0; }
};

struct Summary {
  std::int64_t cases = 0;
  std::map<std::string, std::int64_t> verdicts;  // over invariant impls
  std::vector<ControlGroup> controls;
  // What each library default did on this device: drifted in some cases or in none. Never a
  // failure: it describes the library, GPU and shapes, not the harness.
  std::vector<ControlGroup> observations;
  std::int64_t control_errors = 0;  // controls expected to drift whose case errored
  std::optional<std::string> first_failing_op;
  std::optional<std::string> first_failing_case;
  std::vector<std::string> harness_failures;  // controls that lost sight
  // Controls the spec gave no batch reaching their switch point, each naming the batch it needs.
  std::vector<std::string> controls_without_chance;
  int exit_code = 0;  // exit_code_of(*this)
};

// The exit code of a run: 3 when a case errored, 1 for a finding (an invariant impl's drift,
// nondeterminism or inaccuracy, or a control that lost sight), else 0.
int exit_code_of(const Summary& summary);

Summary summarize(const std::vector<CaseOutcome>& results,
                  const std::vector<std::string>& op_order);
Summary summarize(const std::vector<CaseResult>& results, const std::vector<std::string>& op_order);
// A shard's summary: a control group's cases are spread over the shards, so one shard's cases of
// a group may all pass while another's drift. Whether the harness lost sight is judged on the
// merged report (bitcheck merge), not on a shard: its harness failures (and controls without a
// chance to drift) are left out.
Summary shard_summary(Summary summary);

// The status matrix's row of a case: its op, or "op tp=P" for a case at tp > 1.
std::string matrix_row_name(const std::string& op, int tp);

StatusMatrix build_matrix(const std::vector<CaseOutcome>& results,
                          const std::vector<std::string>& op_order);
StatusMatrix build_matrix(const std::vector<CaseResult>& results,
                          const std::vector<std::string>& op_order);

}  // namespace bitcheck
