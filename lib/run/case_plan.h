// What a case will do before anything runs: whether it runs at all (the skip reasons), its tensors,
// logical rows, the rows computed alone and its layouts in run order, and the rows and columns its
// FP32 reference computes. The runner (run/runner.h) executes the plan.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"
#include "run/layout.h"
#include "spec/contract.h"

namespace bitcheck {

// What a case will do, before anything runs: its tensors, logical rows, the rows computed alone
// and the layouts in run order (the canonical ones first, so every other layout is compared as
// soon as it has run and its outputs, gigabytes for GPU-sized cases, are dropped right away).
struct CasePlan {
  std::vector<TensorDecl> decls;
  bool has_rows = false, has_reductions = false;
  std::int64_t rows = 0;
  std::vector<std::int64_t> alone_rows;
  std::string canonical_rows_layout;
  std::vector<std::string> layouts;

  // -1: a layout at tp = 1 that a case at tp > 1 is compared against ("alone/tp=1"; run first,
  // once), 0: the canonical layout for row outputs, 1: the batch layout, 2: any
  // other.
  int rank(const std::string& layout) const {
    if (parse_tp_layout_name(layout).second == 1) return -1;
    if (layout == canonical_rows_layout && has_rows) return 0;
    if (layout == canonical_reduction_layout) return 1;
    return 2;
  }
  // A canonical layout runs spec.repeats times, for the determinism check.
  bool canonical(const std::string& layout) const {
    return (layout == canonical_rows_layout && has_rows) ||
           (layout == canonical_reduction_layout && has_reductions);
  }
};

// Why the case does not run (dtype, backend, pass, shape, ranks, the impl's own reason, and last,
// device or host memory), or nullopt.
std::optional<std::string> case_skip_reason(const Registry& registry, const Contract& contract,
                                            const OpDef& op, const Impl& impl,
                                            const CaseSpec& spec);

// The batch at which a control's first switch point lies, when the case's batch stays below it
// (its canonical layout runs one row, the others at most spec.rows: every layout takes the same
// path), else 0. Searched as far as a sweep's default switch_max_batch.
std::int64_t rows_to_reach_a_switch(const Impl& impl, const CaseSpec& spec);

CasePlan plan_case(const OpDef& op, const CaseSpec& spec);

// Why the impl cannot run a captured layout, or nullopt: CUDA graphs need a device backend, and an
// impl whose run() cannot capture its launches says so (ImplInfo::graph_capturable).
std::optional<std::string> capture_skip_reason(const Registry& registry, const Impl& impl);

// The layout named `tp_name` ("batch", "alone/tp=1") for the case, or nullopt when it does not
// apply to this op or case (an op's own layout names and the generic ones are disjoint), so it is
// not run.
std::optional<Layout> build_layout(const OpDef& op, const Impl& impl, const CaseSpec& spec,
                                   const CasePlan& plan, const std::string& tp_name);

// The rows (and, for wide outputs, columns) the reference computes.
ReferenceRequest reference_request(const CasePlan& plan, const CaseSpec& spec);

}  // namespace bitcheck
