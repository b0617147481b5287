// Running a case's layouts through an impl: the inputs from the counter-based generator
// (parameters shared across cases), each invocation's batch staged from the logical rows (pad
// slots NaN, row outputs poisoned, reductions carried across invocations), the impl's calls
// recorded (launch paths, kernels, time by phase) and the outputs gathered by logical row.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/device_input_source.h"
#include "core/op.h"
#include "core/provenance.h"
#include "run/case_checks.h"
#include "run/case_plan.h"
#include "run/runner.h"

namespace bitcheck {

// Row and reduction outputs (what the checks compare).
bool is_output(const TensorDecl& decl);

// Parameters (weights, gains) shared by the cases that draw the same ones: the last few, with
// the ids device impls cache their uploads by. Input ids are unique in the process (not per
// Runner).
class ParameterCache {
 public:
  // `special_value_rate`: the case's, for a parameter that takes special values; else 0.
  std::pair<std::shared_ptr<const Tensor>, std::uint64_t> get(const TensorDecl& decl,
                                                              std::uint64_t seed,
                                                              double special_value_rate);

 private:
  std::vector<std::pair<std::string, std::pair<std::shared_ptr<const Tensor>, std::uint64_t>>>
      entries_;
};

struct Inputs {
  std::map<std::string, std::shared_ptr<const Tensor>> tensors;  // logical rows for row inputs
  std::map<std::string, std::uint64_t> ids;
  // Row inputs also generated on the impl's device (DeviceInputSource::generated_rows), their
  // logical rows: each invocation gets them there (Batch::device_inputs) in place of the host
  // tensors.
  std::map<std::string, std::shared_ptr<const DeviceOutput>> device;
};

// The case's inputs on the host; with `device`, its uniform row inputs on that device too.
Inputs generate_inputs(const CasePlan& plan, const CaseSpec& spec, ParameterCache& parameters,
                       const DeviceInputSource* device = nullptr);

// What a layout's calls recorded: their launch paths and, with provenance, their kernels.
struct LayoutRecords {
  std::set<std::string> paths;
  // The kernel sequences of an impl with one declared path (Impl::records_kernel_sequences).
  std::set<std::string> kernel_paths;
  std::vector<KernelUse> kernels;
};

std::uint64_t tensor_bytes(const std::map<std::string, std::shared_ptr<const Tensor>>& tensors);

// Runs every invocation of a layout through the impl; the outputs by logical row. Reductions are
// carried across the invocations; `reductions_wanted` false lets the impl leave them unwritten,
// `outputs_stay_on_device` lets it leave its outputs on its device (LayoutOutputs::on_device: row
// outputs gathered there by logical row); `simulate_device` leaves a host impl's outputs in
// host-held outputs as if it had (run/host_held_output.h); `rows_reference` marks the layout every
// other layout's rows are compared against (Batch::rows_reference).
LayoutOutputs execute_layout(const Layout& layout, Impl& impl, const CaseSpec& spec,
                             const CasePlan& plan, const Inputs& inputs,
                             nlohmann::json& impl_config, CaseTimings& timings,
                             bool reductions_wanted, bool outputs_stay_on_device,
                             bool simulate_device, bool rows_reference, KernelRecorder* recorder,
                             LayoutRecords& records, int tp);

// Row inputs are owned by this case alone once every layout has run: moved, not copied
// (gigabytes for vocab-sized backward cases). Cached parameters are shared, so copied.
std::map<std::string, Tensor> take_logical_inputs(Inputs& inputs);

}  // namespace bitcheck
