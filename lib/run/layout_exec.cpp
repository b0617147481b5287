// Running a case's layouts through an impl (run/layout_exec.h).
#include "run/layout_exec.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "run/device_slots.h"
#include "run/host_held_output.h"
#include "run/input_generator.h"

namespace bitcheck {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t parameter_cache_entries = 6;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::int64_t> full_shape(const TensorDecl& decl, std::int64_t rows) {
  std::vector<std::int64_t> shape = {rows};
  shape.insert(shape.end(), decl.shape.begin(), decl.shape.end());
  return shape;
}

std::string group_scales_string(const std::vector<float>& scales) {
  std::string text;
  for (float scale : scales) text += std::to_string(scale) + ",";
  return text;
}

bool is_identity(const Invocation& invocation, std::int64_t rows) {
  bool identity = invocation.slots() == rows;
  for (std::int64_t s = 0; identity && s < invocation.slots(); ++s) {
    identity = invocation.slot_rows[static_cast<std::size_t>(s)] == s;
  }
  return identity;
}

// One row's copy appended to `runs`: the last run grown when the row follows it on both sides
// (consecutive source rows to consecutive places), else a run of its own.
void append_row(std::vector<CopyRun>& runs, std::size_t from, std::size_t to,
                std::size_t row_bytes) {
  if (!runs.empty() && runs.back().source_offset + runs.back().bytes == from &&
      runs.back().offset + runs.back().bytes == to) {
    runs.back().bytes += row_bytes;
  } else {
    runs.push_back({from, to, row_bytes});
  }
}

// An invocation's rows of a row input held on the device as logical rows: each real slot's row
// copied there (consecutive slots holding consecutive rows in one run), pad slots poisoned as the
// host's are.
std::shared_ptr<const DeviceOutput> rows_in_slots(const DeviceOutput& logical,
                                                  const TensorDecl& decl,
                                                  const Invocation& invocation) {
  const std::size_t row_bytes =
      static_cast<std::size_t>(shape_elements(decl)) * dtype_size(decl.dtype);
  std::shared_ptr<DeviceOutput> slots =
      logical.make_output(row_bytes * static_cast<std::size_t>(invocation.slots()),
                          Tensor::poisoned(decl.dtype, {1}).bits(0), dtype_size(decl.dtype));
  std::vector<CopyRun> runs;
  for (std::int64_t s = 0; s < invocation.slots(); ++s) {
    const std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
    if (row < 0) continue;
    append_row(runs, static_cast<std::size_t>(row) * row_bytes,
               static_cast<std::size_t>(s) * row_bytes, row_bytes);
  }
  slots->copy_runs(logical, runs);
  return slots;
}

// One invocation's batch: parameters and in-order row inputs shared, other row inputs placed in
// their slots (pad slots NaN), row outputs poisoned, reduction outputs carried across invocations.
Batch make_batch(const CaseSpec& spec, const Layout& layout, std::size_t index,
                 const std::vector<TensorDecl>& decls, const Inputs& inputs, std::int64_t rows,
                 LayoutOutputs& result, bool reductions_wanted, bool outputs_stay_on_device,
                 int tp) {
  const Invocation& invocation = layout.invocations[index];
  Batch batch;
  batch.spec = &spec;
  batch.tp = tp;
  batch.invocation = &invocation;
  batch.invocation_index = static_cast<std::int64_t>(index);
  batch.invocation_count = static_cast<std::int64_t>(layout.invocations.size());
  batch.reductions_wanted = reductions_wanted;
  batch.rows_stay_on_device = outputs_stay_on_device;
  batch.reductions_stay_on_device = outputs_stay_on_device;
  batch.captured = layout.captured;
  const bool identity = is_identity(invocation, rows);
  for (const auto& decl : decls) {
    auto on_device = inputs.device.find(decl.name);
    if (decl.role == TensorRole::row_input && on_device != inputs.device.end()) {
      batch.device_inputs[decl.name] =
          identity ? on_device->second : rows_in_slots(*on_device->second, decl, invocation);
      batch.input_ids[decl.name] = identity ? inputs.ids.at(decl.name) : new_input_id();
      continue;
    }
    if (decl.role == TensorRole::parameter || (decl.role == TensorRole::row_input && identity)) {
      batch.inputs[decl.name] = inputs.tensors.at(decl.name);
      batch.input_ids[decl.name] = inputs.ids.at(decl.name);
    } else if (decl.role == TensorRole::row_input) {
      const Tensor& logical = *inputs.tensors.at(decl.name);
      // Pad slots: NaN, so a leak into real rows cannot hide.
      Tensor physical = Tensor::poisoned(decl.dtype, full_shape(decl, invocation.slots()));
      for (std::int64_t s = 0; s < invocation.slots(); ++s) {
        std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
        if (row >= 0) physical.copy_row_from(logical, row, s);
      }
      batch.inputs[decl.name] = std::make_shared<const Tensor>(std::move(physical));
      batch.input_ids[decl.name] = new_input_id();
    } else if (decl.role == TensorRole::row_output) {
      // Poison: an unwritten element shows up as NaN.
      batch.outputs.emplace(decl.name,
                            Tensor::poisoned(decl.dtype, full_shape(decl, invocation.slots())));
    } else {
      batch.outputs.emplace(decl.name, std::move(result.reductions[decl.name]));
    }
  }
  return batch;
}

// An output the impl left on its device: a reduction after the layout's last invocation (the next
// one would carry the host tensor on), a row output at any invocation, in every invocation of the
// layout once in the first; as many bytes as the output. A row output becomes the layout's
// logical rows on the device (the invocation's own buffer when it is the whole layout, else its
// real slots copied there by row into a buffer poisoned like the host's).
void take_device_output(const Impl& impl, const TensorDecl& decl, const Invocation& invocation,
                        bool whole, bool first, bool last, std::int64_t rows, Batch& batch,
                        LayoutOutputs& result) {
  auto held = batch.device_outputs.find(decl.name);
  const bool row = decl.role == TensorRole::row_output;
  const std::size_t row_bytes =
      static_cast<std::size_t>(shape_elements(decl)) * dtype_size(decl.dtype);
  const std::size_t bytes =
      row ? row_bytes * static_cast<std::size_t>(invocation.slots()) : row_bytes;
  const bool mixed = row && !whole && !first && !result.on_device.count(decl.name);
  const bool asked = row ? batch.rows_stay_on_device : batch.reductions_stay_on_device;
  if (!asked || !held->second || held->second->bytes() != bytes || (!row && !last) || mixed) {
    throw std::runtime_error(
        "impl " + impl.name() + " left " + decl.name + " on the device" +
        (!asked          ? " although the runner did not ask for it"
         : !row && !last ? " before the layout's last invocation"
         : mixed         ? " in some of the layout's invocations only"
                         : " as " + std::to_string(held->second ? held->second->bytes() : 0) +
                       " bytes, expected " + std::to_string(bytes)));
  }
  if (!row) {
    result.reductions.erase(decl.name);
    result.on_device[decl.name] = std::move(held->second);
    return;
  }
  if (whole) {
    result.rows.erase(decl.name);
    result.on_device[decl.name] = std::move(held->second);
    result.present.assign(static_cast<std::size_t>(rows), true);
    return;
  }
  if (first) {
    result.rows.erase(decl.name);
    result.on_device[decl.name] = held->second->make_output(
        row_bytes * static_cast<std::size_t>(rows), Tensor::poisoned(decl.dtype, {1}).bits(0),
        dtype_size(decl.dtype));
  }
  std::vector<CopyRun> runs;  // consecutive slots holding consecutive rows: one run
  for (std::int64_t s = 0; s < invocation.slots(); ++s) {
    const std::int64_t logical = invocation.slot_rows[static_cast<std::size_t>(s)];
    if (logical < 0) continue;
    append_row(runs, static_cast<std::size_t>(s) * row_bytes,
               static_cast<std::size_t>(logical) * row_bytes, row_bytes);
    result.present[static_cast<std::size_t>(logical)] = true;
  }
  result.on_device.at(decl.name)->copy_runs(*held->second, runs);
}

// An impl without a device as if it had left its outputs on one (BITCHECK_SIMULATE_DEVICE_OUTPUTS):
// its row outputs after each invocation, its reductions after the last, in host-held outputs.
void hold_outputs(const std::vector<TensorDecl>& decls, bool last, Batch& batch) {
  for (const auto& decl : decls) {
    const bool held =
        decl.role == TensorRole::row_output
            ? batch.rows_stay_on_device
            : decl.role == TensorRole::reduction_output && batch.reductions_stay_on_device && last;
    if (!held || batch.device_outputs.count(decl.name)) continue;
    batch.device_outputs[decl.name] = std::make_shared<HostHeldOutput>(batch.out(decl.name));
  }
}

// Takes an invocation's outputs into the layout's: row outputs by logical row (or whole, when the
// layout is one in-order invocation), reduction outputs as they are (or the handle of one the impl
// left on its device).
void gather_outputs(const Impl& impl, const Invocation& invocation, bool whole, bool first,
                    bool last, const std::vector<TensorDecl>& decls, std::int64_t rows,
                    Batch& batch, LayoutOutputs& result) {
  for (const auto& decl : decls) {
    if (!is_output(decl)) continue;
    if (batch.device_outputs.count(decl.name)) {
      take_device_output(impl, decl, invocation, whole, first, last, rows, batch, result);
      continue;
    }
    if (result.on_device.count(decl.name)) {
      throw std::runtime_error("impl " + impl.name() + " left " + decl.name +
                               " on the device in some of the layout's invocations only");
    }
    Tensor& output = batch.out(decl.name);
    auto expected =
        decl.role == TensorRole::row_output ? full_shape(decl, invocation.slots()) : decl.shape;
    if (output.shape() != expected || output.dtype() != decl.dtype) {
      throw std::runtime_error("impl " + impl.name() + " returned " + decl.name + " as " +
                               to_string(output.dtype()) + shape_string(output.shape()) +
                               ", expected " + to_string(decl.dtype) + shape_string(expected));
    }
    if (decl.role == TensorRole::reduction_output) {
      result.reductions[decl.name] = std::move(output);
      continue;
    }
    if (whole) {
      result.rows[decl.name] = std::move(output);
      result.present.assign(static_cast<std::size_t>(rows), true);
      continue;
    }
    for (std::int64_t s = 0; s < invocation.slots(); ++s) {
      std::int64_t row = invocation.slot_rows[static_cast<std::size_t>(s)];
      if (row < 0) continue;
      auto gathered = result.rows.find(decl.name);
      if (gathered == result.rows.end()) {
        gathered =
            result.rows.emplace(decl.name, Tensor::poisoned(decl.dtype, full_shape(decl, rows)))
                .first;
      }
      gathered->second.copy_row_from(output, s, row);
      result.present[static_cast<std::size_t>(row)] = true;
    }
  }
}

std::uint64_t tensor_bytes(const std::map<std::string, Tensor>& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& entry : tensors) bytes += entry.second.bytes();
  return bytes;
}

// The bytes the runner copies to stage an invocation: its row inputs placed in slots (none when
// the invocation is the logical rows in order) and its row outputs gathered back by logical row
// on the host (not those the impl left on the device: the device copies them there).
std::uint64_t staged_bytes(const Batch& batch, const std::vector<TensorDecl>& decls,
                           bool identity) {
  std::uint64_t bytes = 0;
  for (const auto& decl : decls) {
    if (decl.role == TensorRole::row_input && !identity && batch.inputs.count(decl.name))
      bytes += batch.in(decl.name).bytes();
    if (decl.role == TensorRole::row_output && !identity &&
        !batch.device_outputs.count(decl.name)) {
      const auto found = batch.outputs.find(decl.name);
      if (found != batch.outputs.end()) bytes += found->second.bytes();
    }
  }
  return bytes;
}

// One call of the impl inside the recordings of its paths and, when `recorder` is given, of its
// kernels (what the recorder holds before the call is dropped, what it holds after is the call's),
// its time split: the uploads, downloads and bookkeeping it recorded, and the rest as the impl call
// itself, which moves the bytes of the batch's tensors.
void run_recorded(Impl& impl, Batch& batch, KernelRecorder* recorder, CaseTimings& timings,
                  LayoutRecords& records) {
  PathRecording paths;
  KernelRecording kernels(recorder != nullptr);
  if (recorder) recorder->begin();
  PhaseProfile call;
  auto start = Clock::now();
  {
    // A rank of a group at tp > 1 never waits for a slot: its peers may hold the others while
    // they wait for it in a collective.
    std::optional<DeviceSlot> slot;
    if (batch.tp == 1) {
      slot.emplace();
      call.add(Phase::device_wait, seconds_since(start));
      start = Clock::now();
    }
    PhaseRecording phases(call);
    impl.run(batch);
  }
  const double seconds = seconds_since(start);
  timings.impl_seconds += seconds;
  const double recorded = call[Phase::uploads].seconds + call[Phase::downloads].seconds +
                          call[Phase::bookkeeping].seconds;
  call.add(Phase::impl_calls, std::max(0.0, seconds - recorded),
           tensor_bytes(batch.inputs) + tensor_bytes(batch.outputs));
  timings.profile += call;
  if (recorder)
    for (KernelLaunch& launch : recorder->take()) kernels.add(std::move(launch));
  records.paths.insert(paths.paths().begin(), paths.paths().end());
  tally_kernels(kernels.launches(), records.kernels);
  if (!impl.records_kernel_sequences()) return;
  const std::string sequence = kernel_sequence_path(kernels.launches());
  if (!sequence.empty()) records.kernel_paths.insert(sequence);
}

}  // namespace

bool is_output(const TensorDecl& decl) {
  return decl.role == TensorRole::row_output || decl.role == TensorRole::reduction_output;
}

std::pair<std::shared_ptr<const Tensor>, std::uint64_t> ParameterCache::get(
    const TensorDecl& decl, std::uint64_t seed, double special_value_rate) {
  std::string key =
      decl.name + "/" + to_string(decl.dtype) + "/" + shape_string(decl.shape) + "/" +
      std::to_string(seed) + "/" + std::to_string(decl.scale) + "/" +
      group_scales_string(decl.group_scales) + "/" + std::to_string(decl.index_bound) + "/" +
      std::to_string(static_cast<int>(decl.generator)) + "/" + std::to_string(special_value_rate);
  for (const auto& entry : entries_) {
    if (entry.first == key) return entry.second;
  }
  auto tensor =
      std::make_shared<const Tensor>(generate_input(decl, decl.shape, seed, special_value_rate));
  if (entries_.size() >= parameter_cache_entries) entries_.erase(entries_.begin());
  entries_.push_back({key, {tensor, new_input_id()}});
  return entries_.back().second;
}

Inputs generate_inputs(const CasePlan& plan, const CaseSpec& spec, ParameterCache& parameters,
                       const DeviceInputSource* device) {
  Inputs inputs;
  for (const auto& decl : plan.decls) {
    if (decl.role == TensorRole::parameter) {
      auto [tensor, id] =
          parameters.get(decl, spec.seed, decl.takes_special_values ? spec.special_values : 0);
      inputs.tensors[decl.name] = tensor;
      inputs.ids[decl.name] = id;
    } else if (decl.role == TensorRole::row_input) {
      inputs.tensors[decl.name] = std::make_shared<const Tensor>(generate_input(
          decl, full_shape(decl, plan.rows), spec.seed, spec.special_values, spec.ids));
      inputs.ids[decl.name] = new_input_id();
      if (device) {
        if (auto held = device->generated_rows(decl, plan.rows, spec.seed, spec.special_values))
          inputs.device[decl.name] = std::move(held);
      }
    }
  }
  return inputs;
}

std::uint64_t tensor_bytes(const std::map<std::string, std::shared_ptr<const Tensor>>& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& entry : tensors) bytes += entry.second->bytes();
  return bytes;
}

LayoutOutputs execute_layout(const Layout& layout, Impl& impl, const CaseSpec& spec,
                             const CasePlan& plan, const Inputs& inputs,
                             nlohmann::json& impl_config, CaseTimings& timings,
                             bool reductions_wanted, bool outputs_stay_on_device,
                             bool simulate_device, bool rows_reference, KernelRecorder* recorder,
                             LayoutRecords& records, int tp) {
  LayoutOutputs result;
  result.present.assign(static_cast<std::size_t>(plan.rows), false);
  std::shared_ptr<void> layout_state;  // the impl's state across this layout's invocations
  // One invocation holding every row in order (the batch layout): its outputs are the logical
  // outputs, taken over without a copy.
  const bool whole =
      layout.invocations.size() == 1 && is_identity(layout.invocations[0], plan.rows);
  // Row outputs gathered on the host are made (poisoned) at the first invocation that brings
  // rows back: an impl that leaves its rows on the device never needs them.
  for (const auto& decl : plan.decls) {
    if (decl.role == TensorRole::reduction_output)
      result.reductions.emplace(decl.name, Tensor(decl.dtype, decl.shape));
  }
  for (std::size_t i = 0; i < layout.invocations.size(); ++i) {
    const bool identity = is_identity(layout.invocations[i], plan.rows);
    auto staging_start = Clock::now();
    Batch batch = make_batch(spec, layout, i, plan.decls, inputs, plan.rows, result,
                             reductions_wanted, outputs_stay_on_device, tp);
    batch.rows_reference = rows_reference;
    batch.layout_state = layout_state;
    double staging_seconds = seconds_since(staging_start);
    run_recorded(impl, batch, recorder, timings, records);
    layout_state = batch.layout_state;
    if (!batch.impl_config.is_null()) impl_config = batch.impl_config;
    staging_start = Clock::now();
    if (simulate_device) hold_outputs(plan.decls, i + 1 == layout.invocations.size(), batch);
    const std::uint64_t staged = staged_bytes(batch, plan.decls, identity);
    gather_outputs(impl, layout.invocations[i], whole, i == 0, i + 1 == layout.invocations.size(),
                   plan.decls, plan.rows, batch, result);
    staging_seconds += seconds_since(staging_start);
    timings.profile.add(Phase::staging, staging_seconds, staged);
  }
  for (const auto& decl : plan.decls) {  // a layout that brought no rows back: all poisoned
    if (decl.role == TensorRole::row_output && !result.rows.count(decl.name) &&
        !result.on_device.count(decl.name))
      result.rows.emplace(decl.name, Tensor::poisoned(decl.dtype, full_shape(decl, plan.rows)));
  }
  return result;
}

std::map<std::string, Tensor> take_logical_inputs(Inputs& inputs) {
  std::map<std::string, Tensor> logical_inputs;
  for (auto& [name, tensor] : inputs.tensors) {
    if (tensor.use_count() == 1) {
      logical_inputs.emplace(name, std::move(*std::const_pointer_cast<Tensor>(tensor)));
      tensor.reset();
    } else {
      logical_inputs.emplace(name, *tensor);
    }
  }
  return logical_inputs;
}

}  // namespace bitcheck
