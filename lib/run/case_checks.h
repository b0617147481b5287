// The three checks of a case as functions of its outputs, each returning a typed result:
// invariance (a layout's rows and token reductions against the canonical ones, bit for bit),
// determinism (a canonical layout run again) and accuracy (against the FP32 reference).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device_output.h"
#include "core/op.h"
#include "core/verdict.h"
#include "run/compare.h"
#include "spec/contract.h"

namespace bitcheck {

// Whether a case of `impl` is held to drift: a control in a pass it drifts in, at a tp from its
// drifts_from_tp, with the layout it drifts in (drifts_only_in_layout) among the case's. The
// runner, an errored case's entry and a rank group's all decide it here.
bool case_expected_to_drift(const Impl& impl, const CaseSpec& spec);

// The elements of a decl's shape: one row's for a row tensor, the whole tensor's otherwise.
std::int64_t shape_elements(const TensorDecl& decl);

// The outputs of one layout execution, by logical row.
struct LayoutOutputs {
  std::map<std::string, Tensor> rows;        // row outputs gathered by logical row
  std::vector<bool> present;                 // which logical rows the layout produced
  std::map<std::string, Tensor> reductions;  // on the host
  // Outputs the impl left on its device (Batch::device_outputs): a reduction as the impl made it,
  // a row output as the layout's logical rows (those it did not produce poisoned). One held only
  // there has no entry in `rows` or `reductions` until bring_to_host: the checks compare it on
  // the device against another layout's and bring over only what they read (a drift's rows).
  std::map<std::string, std::shared_ptr<DeviceOutput>> on_device;
};

// What the checks did with outputs left on the device: bytes compared there (both sides) and the
// time, and bytes brought to the host (a drift's metrics need the values) and the time.
struct DeviceWork {
  double compare_seconds = 0;
  std::uint64_t compared_bytes = 0;
  std::uint64_t settled_bytes = 0;  // of the result's compared bytes, those the device settled
  double fetch_seconds = 0;
  std::uint64_t fetched_bytes = 0;
  void append(const DeviceWork& other);
};

// Brings output `decl` of `outputs` to the host when the device alone holds it (a row output as
// its logical rows, a reduction under the decl's shape); what it moved is added to `work`.
void bring_to_host(LayoutOutputs& outputs, const TensorDecl& decl, DeviceWork& work);
// Every row output (`rows`) and every reduction (`reductions`) of `decls` the device alone holds.
void bring_all_to_host(LayoutOutputs& outputs, const std::vector<TensorDecl>& decls,
                       DeviceWork& work, bool rows, bool reductions);

// What the other layouts are compared against: the canonical layout for row outputs (rows
// computed alone) and the batch layout (token reductions, and rows outside the alone sample).
struct CanonicalOutputs {
  std::string rows_layout;               // the canonical layout's name for row outputs
  const LayoutOutputs* alone = nullptr;  // set once the canonical row layout ran
  const LayoutOutputs* batch = nullptr;  // set once the batch layout ran
};

struct InvarianceResult {
  std::vector<DriftMetrics> drift;   // comparisons that differ, in the order they were made
  std::int64_t comparisons = 0;      // comparisons made (tensor x layout)
  std::uint64_t compared_bytes = 0;  // bytes read on both sides
  DeviceWork device;                 // the part of it done where the outputs were made
  bool passed() const { return drift.empty(); }
  void append(InvarianceResult other);
};

struct DeterminismResult {
  std::vector<DriftMetrics> nondeterminism;  // repeats of a canonical layout that differ
  std::uint64_t compared_bytes = 0;          // bytes read on both sides
  DeviceWork device;                         // the part of it done where the outputs were made
  bool passed() const { return nondeterminism.empty(); }
  void append(DeterminismResult other);
};

struct AccuracyResult {
  std::vector<AccuracyMetrics> tensors;  // one per output tensor, in declaration order
  bool passed() const;
};

// Invariance of one layout: each row output's present rows against the alone layout's (rows
// outside the alone sample against the batch layout's, except in the batch layout itself), and,
// when the layout holds every token in order, each reduction output against the batch layout's.
// An output left on the device on both sides is compared there first: equal rows (or an equal
// reduction) give the host comparison's result (every element compared, none differing) without a
// transfer; only the differing rows (the differing reduction) come to the host, for the drift's
// metrics. The canonical layouts' outputs are on the host too.
InvarianceResult check_invariance(const std::vector<TensorDecl>& decls, const std::string& layout,
                                  bool covers_all_rows_in_order, LayoutOutputs& outputs,
                                  const CanonicalOutputs& canonical);

// Determinism: run `repeat` (0-based) of `layout` against its first run, every output whole.
// A canonical layout at the case's tp against the same layout at tp = 1 (`reference_layout`, as
// "alone/tp=1"): every row both produced, and the token reductions both hold.
InvarianceResult check_across_tp(const std::vector<TensorDecl>& decls, const std::string& layout,
                                 const std::string& reference_layout, LayoutOutputs& outputs,
                                 const LayoutOutputs& reference);

DeterminismResult check_determinism(const std::vector<TensorDecl>& decls, const std::string& layout,
                                    int repeat, LayoutOutputs& first, LayoutOutputs& again);

// What the accuracy check compares: `row_outputs` on the request's rows (and columns), the batch
// layout's reductions on its reduction rows, against `reference`, each output within its
// contract row (`threshold_of(output name)`).
struct AccuracyInputs {
  const LayoutOutputs* row_outputs = nullptr;
  const LayoutOutputs* batch = nullptr;
  const std::map<std::string, Tensor>* reference = nullptr;
  const ReferenceRequest* request = nullptr;
  std::function<const Threshold&(const std::string& output)> threshold_of;
  NonFiniteRules nonfinite_rules;
};
// One output's accuracy; `op` names the op in the error thrown when the reference lacks it.
AccuracyMetrics check_output_accuracy(const std::string& op, const TensorDecl& output,
                                      const AccuracyInputs& inputs);
// Every output's, in declaration order.
AccuracyResult check_outputs_accuracy(const std::string& op, const std::vector<TensorDecl>& decls,
                                      const AccuracyInputs& inputs);

// The case's verdict from its checks: nondeterministic, else drift, else inaccurate, else pass.
Verdict verdict_of(const InvarianceResult& invariance, const DeterminismResult& determinism,
                   const AccuracyResult& accuracy);

}  // namespace bitcheck
