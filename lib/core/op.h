// The op / impl / case model. An OpDef names its tensors and owns the FP32 reference; an Impl
// computes the op on one backend for one physical batch (an Invocation of a layout). Ops and impls
// are registered explicitly through register_all() (kernels/manifest.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_output.h"
#include "core/dtype.h"
#include "core/paths.h"
#include "core/provenance.h"
#include "core/run_settings.h"
#include "core/tensor.h"
#include "core/tensor_parallel.h"
#include "core/token_ids.h"

namespace bitcheck {

enum class Pass { forward, backward };
std::string to_string(Pass pass);
std::optional<Pass> parse_pass(const std::string& name);

using Dims = std::map<std::string, std::int64_t>;
std::string dims_string(const Dims& dims);  // "K=128,N=64"

// One case: op x impl x dtype x pass x shape x batch x seed, run under a set of layouts.
struct CaseSpec {
  std::string op;
  std::string impl;
  std::string dtype_name;  // as written in the spec; may be out of scope (e.g. fp8)
  DType dtype = DType::fp32;
  Pass pass = Pass::forward;
  Dims dims;              // op dimensions other than the batch (e.g. N, K)
  std::int64_t rows = 1;  // logical rows (tokens) in the case: the batch size M
  std::uint64_t seed = 1;
  std::vector<std::string> layouts;
  int repeats = 2;  // canonical runs for the determinism check (>= 2)
  // Ranks the case's layouts run on (tensor parallelism); its canonical rows are still those
  // alone at tp = 1, so a token's bits are compared across batches and across TP sizes.
  int tp = 1;
  std::int64_t alone_rows = 64;  // rows computed alone (batch 1); all rows when rows <= this
  std::int64_t index = 0;        // position in the sweep's full case list (shards keep it)
  // Fraction of float row-input elements replaced by NaN, +-Inf, subnormals and -0 (0 = off).
  double special_values = 0;
  // How the token-id inputs (Generator::token_id) are drawn. Only a case whose op has such an
  // input holds anything but uniform (the spec expansion sees to it).
  IdDistribution ids = IdDistribution::uniform;
  // A declared path forced on every call (a path the batch cannot reach, see PathDecl::forced_by);
  // empty = the impl picks its paths itself.
  std::string forced_path;
  // stable: "op/impl/dtype/pass/dims/M=rows/seed=s", plus "/tp=P" when tp > 1, "/ids=zipf" (or
  // few) when the ids are
  // not uniform, "/special=rate" when special values are on and "/path=name" when a path is
  // forced
  std::string id() const;
  // The case's inputs and reference without its impl: cases of one group get identical inputs and
  // one FP32 reference (the runner computes it once per group; shards keep a group together).
  std::string input_group() const;
  std::int64_t dim(const std::string& name) const;
  // An optional dim (OpDef::optional_dim_names): its value, 0 when the shape leaves it out.
  std::int64_t optional_dim(const std::string& name) const;
};

enum class TensorRole {
  row_input,         // one row per token; placed in slots by the layout; pad slots hold NaN
  parameter,         // shared by all rows (weights, gains); identical in every layout
  row_output,        // one row per token; compared per logical row across layouts
  reduction_output,  // reduced over tokens (dW, dweight): fp32 accumulator, compared whole
};
std::string to_string(TensorRole role);

enum class Generator {
  uniform,   // counter_uniform(...) * scale (* the column's group scale), rounded to the dtype
  index,     // integer in [0, index_bound), uniform (positions)
  token_id,  // token id in [0, index_bound), drawn from the case's IdDistribution (CaseSpec::ids)
};

struct TensorDecl {
  std::string name;
  TensorRole role = TensorRole::row_input;
  DType dtype = DType::fp32;
  std::vector<std::int64_t> shape;  // row tensors: the shape of ONE row; others: the full shape
  Generator generator = Generator::uniform;
  float scale = 1.0f;
  std::int64_t index_bound = 0;
  // Uniform generator: a row's columns in equal groups (a head's elements each), group g's values
  // also times group_scales[g] (empty: every group at `scale` alone). Attention's q uses it to give
  // some heads scores wide enough to move the softmax's reference max after a row's first block.
  std::vector<float> group_scales = {};
  // A parameter that takes the case's special values too (row inputs always do): the embedding
  // table, the only float input of embedding's forward. Other parameters never do.
  bool takes_special_values = false;
};

// Ops over sequences (attention): a run of consecutive slots holding consecutive tokens of one
// sequence. Tokens 0 .. start_position-1 of the sequence came in earlier invocations of the layout
// (they are in the KV cache); the segment's tokens are at positions start_position + i.
struct Segment {
  std::int64_t sequence = 0;
  std::int64_t first_slot = 0;
  std::int64_t length = 0;
  std::int64_t start_position = 0;
};

// One physical batch presented to an impl: slot s holds logical row slot_rows[s] (-1 = padding).
struct Invocation {
  std::vector<std::int64_t> slot_rows;
  std::vector<Segment> segments;  // empty for ops whose rows are independent tokens
  std::int64_t slots() const { return static_cast<std::int64_t>(slot_rows.size()); }
  std::int64_t valid_rows() const;
};

// A layout: the same logical rows presented as a sequence of invocations.
struct Layout {
  std::string name;
  std::vector<Invocation> invocations;
  // True when every logical row appears exactly once, in increasing order, across invocations:
  // then reduction outputs (dW, dweight) must equal the canonical ones bit for bit.
  bool covers_all_rows_in_order = false;
  // The graph layout: each invocation's launches are captured into a CUDA graph (stream capture)
  // and the graph replayed, instead of launched eagerly.
  bool captured = false;
};

// The tensors of one invocation. Row tensors have `slots` rows; reduction outputs are fp32
// accumulators that persist across the invocations of a layout (zero before the first).
struct Batch {
  const CaseSpec* spec = nullptr;
  const Invocation* invocation = nullptr;
  // The ranks this invocation runs on: the case's tp, or 1 for the canonical layouts at tp = 1
  // that a case at tp > 1 is compared against.
  int tp = 1;
  std::int64_t invocation_index = 0;
  std::int64_t invocation_count = 1;  // invocations in this layout execution
  // The layout is captured (Layout::captured): a capturable impl captures its launches into a
  // CUDA graph and replays it (ImplInfo::graph_capturable).
  bool captured = false;
  // false when no check reads this layout's reduction outputs (a layout that does not hold every
  // token in order, such as alone or shuffled): an impl may then leave them unwritten and save
  // the work and the transfers (gigabytes for a vocab-sized dW).
  bool reductions_wanted = true;
  // How many parameter tensors the caller cycles through in one case (a chain of L layers: every
  // layer's weights; 0 for one op). A device cache of parameters holds at least that many, so a
  // deep chain's weights are uploaded once per case, not once per call.
  std::size_t parameters_in_use = 0;
  // Inputs are shared and immutable. `input_ids` gives each a process-unique id for its content
  // (parameters keep theirs across invocations and cases), so a device impl can cache uploads.
  std::map<std::string, std::shared_ptr<const Tensor>> inputs;
  std::map<std::string, std::uint64_t> input_ids;
  std::map<std::string, Tensor> outputs;
  // Set by the runner when it can compare this layout's outputs where they are made: an impl may
  // then leave an output in `device_outputs` (under the output's name, as many bytes as the host
  // tensor, in its layout) instead of writing it to `outputs`: a row output at any invocation (its
  // slots' rows, pads included) when `rows_stay_on_device`, a reduction output at the layout's
  // last when `reductions_stay_on_device`. When false the outputs come to the host (a composite
  // impl that reads its calls' rows asks its calls for reductions only).
  bool rows_stay_on_device = false;
  bool reductions_stay_on_device = false;
  std::map<std::string, std::shared_ptr<DeviceOutput>> device_outputs;
  // Row inputs a composed impl (the chain) holds on the impl's device, in the invocation's slots,
  // pads included: given only to an impl that reads its row inputs there
  // (ImplInfo::row_inputs_on_device), in place of their host tensors in `inputs`.
  std::map<std::string, std::shared_ptr<const DeviceOutput>> device_inputs;
  // Set by the runner for the layout whose rows every other layout's are compared against (the
  // canonical alone layout): a composed impl moves its values between its calls through the host
  // there and on the device elsewhere, so a difference between the two ways is drift.
  bool rows_reference = false;
  nlohmann::json impl_config;  // an impl records the configuration it used (e.g. a cuBLASLt pin)
  // State an impl keeps across the invocations of one layout execution (e.g. a KV cache): empty
  // before the first invocation, dropped after the last.
  std::shared_ptr<void> layout_state;

  const Tensor& in(const std::string& name) const;
  Tensor& out(const std::string& name);
  std::int64_t slots() const { return invocation->slots(); }
  bool is_pad(std::int64_t slot) const { return invocation->slot_rows[slot] < 0; }
};

// A process-unique id for the content of a new input tensor (Batch::input_ids); the runner and
// impls that compose others (the chain) draw from the same counter.
std::uint64_t new_input_id();

// Settings and result of timing one impl on one case's shape (device-resident buffers, warm-up,
// median of repeats, inputs rotated through at least `rotate_bytes` so caches are not measured).
struct BenchSettings {
  int warmup = 5;
  int repeats = 30;
  std::size_t rotate_bytes = std::size_t(256) << 20;
};
struct BenchMeasurement {
  double median_ms = 0;
  double min_ms = 0;
  double flops = 0;        // useful floating-point operations of one run (0 if memory-bound)
  double bytes_moved = 0;  // each input read once, each output written once
  nlohmann::json config;   // e.g. the cuBLASLt configuration that was timed
  // The impl found this point bound by memory although its op has a library-default baseline (an
  // MoE decode step, which reads its chosen experts' weights for a few tokens each): bench also
  // times a copy of bytes_moved and reports both.
  bool also_against_copy = false;
};

// What an impl claims, which decides how its verdicts read.
enum class ImplKind {
  invariant,  // claims invariance: a drift is a failure
  control,    // exists to prove the harness sees drift: a control that passes means lost sight
  // A library default (cuBLASLt's heuristic, a framework's own call): neither a claim nor a
  // control. Whether it drifts depends on the GPU, the shape and the library version, so a run
  // observes what it did and reports it; its passing never means the harness lost its sight.
  library_default,
};

// What an impl is, as data: its name, backend, kind, passes, dtypes, launch paths and
// description. Our impls, plugin impls and Python impls all fill one and hand it to Impl.
struct ImplInfo {
  std::string name;
  std::string backend;  // "cpu" or "cuda"
  ImplKind kind = ImplKind::invariant;
  // For a control: the real failure it models. For an invariant impl: what fixes its order.
  std::string description;
  std::vector<Pass> passes = {Pass::forward, Pass::backward};
  // A control's passes in which it must drift (a backward-only failure model keeps an invariant
  // forward). Every (control, dtype, pass) group so marked must drift somewhere, so only a drift
  // built into the impl, one that happens on every GPU, may be expected. Read for controls only.
  std::vector<Pass> drifts_in = {Pass::forward, Pass::backward};
  // The dtypes the impl runs, by name; empty: every dtype. An impl that limits them skips the
  // others in its skip_reason (dtype_skip_reason).
  std::vector<std::string> dtypes;
  // The launch paths the impl can take (PathDecl). run() records the ones each call takes with
  // record_path(); empty: one path, single_path_name, recorded for it.
  std::vector<PathDecl> paths;
  // How the impl runs on several ranks (tensor_parallel.h); by default on one rank only.
  TensorParallelism tensor_parallelism;
  // Whether run() can capture its launches into a CUDA graph when Batch::captured is set (its
  // uploads before them, its downloads after, nothing synchronizing in between). Impls that cannot
  // skip the graph layout, with the reason.
  bool graph_capturable = false;
  // A control whose drift is built into one layout (the graph layout: a path chosen by a query
  // that answers differently under capture): a case that does not run that layout cannot drift.
  std::string drifts_only_in_layout;
  // `bitcheck bench`: the impl this one is timed against at the same point, where it is not the
  // op's bench_baseline (a TP matmul against NCCL's default TP matmul of its split, not the
  // one-GPU cuBLASLt heuristic).
  std::string bench_baseline;
  // run() reads its row inputs from Batch::device_inputs where they are given there (a CUDA impl
  // through cuda_support::input_rows), never from their host tensors.
  bool row_inputs_on_device = false;

  static ImplInfo invariant(std::string name, std::string backend, std::string description);
  static ImplInfo control(std::string name, std::string backend, std::string description);
  static ImplInfo library_default(std::string name, std::string backend, std::string description);
  ImplInfo& only_passes(std::vector<Pass> supported);
  ImplInfo& drifting_in(std::vector<Pass> drifting);
  ImplInfo& with_dtypes(std::vector<std::string> supported);
  ImplInfo& with_paths(std::vector<PathDecl> declared);
  ImplInfo& on_ranks(TensorParallelism parallelism);
  ImplInfo& capturable_in_graphs();
  ImplInfo& drifting_only_in_layout(std::string layout);
  ImplInfo& timed_against(std::string impl);
  ImplInfo& reading_row_inputs_on_device();
};

class Impl {
 public:
  explicit Impl(ImplInfo info);
  virtual ~Impl() = default;

  const ImplInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  const std::string& backend() const { return info_.backend; }
  const std::string& description() const { return info_.description; }
  // false for a control and for a library default.
  bool claims_invariance() const { return info_.kind == ImplKind::invariant; }
  bool is_library_default() const { return info_.kind == ImplKind::library_default; }
  bool supports(Pass pass) const;
  // Whether the dtype (by name) is among info().dtypes, or the impl does not limit them.
  bool supports_dtype(const std::string& dtype_name) const;
  // A control in a pass of its drifts_in.
  bool expected_to_drift(Pass pass) const;
  const std::vector<PathDecl>& paths() const { return info_.paths; }
  // Whether the impl declares no choice among paths (one path, not a family: none declared, or
  // one such as cuBLASLt's "heuristic"): with --provenance its calls then record the kernels they
  // launched as their paths (core/provenance.h), which is where such an impl's choice shows.
  bool records_kernel_sequences() const;
  const TensorParallelism& tensor_parallelism() const { return info_.tensor_parallelism; }

  // A reason to skip the case (dtype or shape the impl does not handle), or nullopt to run it.
  virtual std::optional<std::string> skip_reason(const CaseSpec&) const { return std::nullopt; }
  // Micro-batch boundaries for token reductions fall on multiples of this many tokens.
  virtual std::int64_t token_granularity() const { return 1; }
  // Device memory the impl needs beyond the case's tensors (library workspace, intermediates the
  // op does not declare), counted by the device-memory check before the case runs.
  virtual std::size_t device_workspace_bytes(const CaseSpec&) const { return 0; }
  // The batch values where the path changes for the case's shape (spec.rows ignored), up to
  // `max_rows`; empty when the path does not depend on the batch. A sweep's
  // "batches": "switch-points" takes each side of them. A control declares its own too: a control
  // case whose batch stays below the first one had no chance to drift, and is reported so.
  virtual std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t /*max_rows*/) const {
    return {};
  }
  // Computes the outputs of one invocation. Throws on failure (the case becomes `error`).
  virtual void run(Batch& batch) = 0;
  // Times the impl on the case's shape (batch = spec.rows) entirely on the device; nullopt when
  // the impl has no benchmark (CPU impls). Throws on failure.
  virtual std::optional<BenchMeasurement> benchmark(const CaseSpec&, const BenchSettings&) {
    return std::nullopt;
  }

 protected:
  // The reason a case's dtype is not among info().dtypes ("dtype fp16 is not among the <whose>
  // dtypes (fp32,bf16)"), or nullopt.
  std::optional<std::string> dtype_skip_reason(const CaseSpec& spec,
                                               const std::string& whose) const;

 private:
  ImplInfo info_;
};

// Reference outputs for a subset of rows: row outputs for `rows` (in that order), reduction
// outputs for the reduction tensor's rows listed in `reduction_rows`, all as fp32.
struct ReferenceRequest {
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> reduction_rows;
  // Wide row outputs: the columns to compute, per output (absent = all). A reference may ignore
  // it and return every column; the accuracy check compares whatever it returns.
  std::map<std::string, std::vector<std::int64_t>> columns;
};

// Ops whose cases say more than the three checks do (the chain: each call's status in execution
// order) extend the report through this; the pipeline never names an op.
struct ReportExtension {
  std::string key;  // the field of a case's report entry that holds the details
  // The details of a case that ran (not skipped), from its report entry.
  std::function<nlohmann::json(const nlohmann::json& case_entry)> details;
  // A case's lines for the terminal (repro), from its details.
  std::function<std::vector<std::string>(const nlohmann::json& details)> case_lines;
  // The terminal summary's text over a report's results ("" when nothing applies).
  std::function<std::string(const nlohmann::json& results)> run_summary;
};

struct OpDef {
  std::string name;
  std::string summary;
  std::vector<std::string> dim_names;  // required shape dims in the spec, besides the batch
  // Shape dims a spec may leave out (an option, such as moe's hot_experts): 0 when absent, and a
  // shape that gives 0 leaves it out too, so a case id names it only when it is set.
  std::vector<std::string> optional_dim_names;
  // A shape the op cannot mean, found when the spec is read (bad input, exit 2): the dim at fault
  // and what was expected of it. shape_problem, by contrast, skips a case (an impl's limits).
  std::function<std::optional<std::pair<std::string, std::string>>(const Dims&)> dims_problem;
  bool has_backward = true;
  std::string tolerance_key;  // contract threshold row; defaults to name
  // `bitcheck bench` baseline: the impl that is the library default (e.g. cublaslt-heuristic);
  // empty for memory-bound ops, which are measured against the device copy bandwidth.
  std::string bench_baseline;
  // A compute-bound op whose library default lives outside bitcheck (attention: PyTorch SDPA, timed
  // by a script): bench reports its TFLOP/s and names this instead of a copy-bandwidth ratio.
  std::string bench_external_baseline;
  // Useful floating-point operations of one run of a case at spec.rows rows (bench's TFLOP/s of
  // impls from outside bitcheck, which do not know the op); unset for memory-bound ops.
  std::function<double(const CaseSpec&)> bench_flops;
  // Tensors of a case (inputs and outputs) for its pass and dtype.
  std::function<std::vector<TensorDecl>(const CaseSpec&)> tensors;
  // Validates dims beyond presence (e.g. even head dim); returns a reason when invalid.
  std::function<std::optional<std::string>(const CaseSpec&)> shape_problem;
  // FP32 Eigen reference on the logical (dtype-rounded) inputs: `inputs` row tensors hold all
  // logical rows in order. Fills `outputs` with one fp32 tensor per output, rows as requested.
  std::function<void(const CaseSpec&, const std::map<std::string, Tensor>& inputs,
                     const ReferenceRequest&, std::map<std::string, Tensor>& outputs)>
      reference;
  // Ops over sequences (attention) bring their own layouts; unset, the generic ones apply. Logical
  // rows of a case (default: spec.rows), the layout names the op accepts, its canonical layout for
  // row outputs (which must present every logical row), and the builder: nullopt when a layout
  // does not apply to the case (e.g. decode in a backward pass, or a generic layout name).
  std::function<std::int64_t(const CaseSpec&)> logical_rows;
  std::vector<std::string> layout_names;
  std::string canonical_layout;
  std::function<std::optional<Layout>(const std::string& name, const CaseSpec&)> make_layout;
  // Ops composed of other ops' calls (the chain): the calls as cases of those ops, so a case's
  // estimated cost (sharding) is the sum of its calls' costs. Unset: the op's own tensors.
  std::function<std::vector<CaseSpec>(const CaseSpec&)> parts;
  // Ops composed of other ops' calls (the chain), instead of `reference`: each call's FP32
  // reference on the inputs the impl actually gave that call, i.e. on the impl's own earlier
  // outputs, read from `trajectory` (every row output of the case by name, all logical rows, as
  // the impl stored them in the batch layout). Each call is then held to its own op's contract row
  // (`threshold_of`), however far a rounding difference upstream has carried the impl's values
  // from an end-to-end FP32 composition.
  std::function<void(const CaseSpec&, const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, Tensor>& trajectory, const ReferenceRequest&,
                     std::map<std::string, Tensor>& outputs)>
      reference_along;
  // The contract row of an output: {tolerance key, tensor} (the chain: "l0.qkv.y" ->
  // {"matmul", "y"}). Unset: {tolerance_key, the output's name}.
  std::function<std::pair<std::string, std::string>(const std::string& output)> threshold_of;
  // Unset for ops whose report entry is the three checks alone.
  std::optional<ReportExtension> report_extension;
  // Ops whose math is defined per rank count (the collectives: one contribution per rank): a case
  // at tp = P is its own canonical, with no comparison across TP sizes.
  bool tp_in_math = false;
};

class Registry {
 public:
  void add_op(OpDef op);
  void add_impl(const std::string& op, std::unique_ptr<Impl> impl);
  // A backend that is compiled out or has no device: its impls' cases are skipped with the reason.
  void set_backend_status(const std::string& backend, bool available, std::string reason);
  // A backend with a device (CUDA): what the harness asks of it (core/backend.h).
  void set_device_backend(const std::string& backend, std::unique_ptr<DeviceBackend> device);
  // What an op needs set up for a run and finished at its end (core/run_settings.h).
  void add_run_hook(RunHook hook);
  // The source of the kernels a backend's impls launch (core/provenance.h), started by a run with
  // provenance (start_run).
  void set_kernel_recorder(const std::string& backend, std::unique_ptr<KernelRecorder> recorder);

  const OpDef* find_op(const std::string& name) const;
  Impl* find_impl(const std::string& op, const std::string& impl) const;
  std::vector<const OpDef*> ops() const;  // registration order
  std::vector<Impl*> impls(const std::string& op) const;
  bool backend_available(const std::string& backend) const;
  std::string backend_reason(const std::string& backend) const;
  std::vector<std::string> backends() const;
  DeviceBackend* device_backend(const std::string& backend) const;  // nullptr: none registered
  std::vector<std::string> device_backend_names() const;
  const std::vector<RunHook>& run_hooks() const { return run_hooks_; }
  KernelRecorder* kernel_recorder(const std::string& backend) const;  // nullptr: none
  std::vector<KernelRecorder*> kernel_recorders() const;

 private:
  std::vector<OpDef> ops_;
  // Before the backends, so destroyed after them: a backend's meta reads its recorder.
  std::map<std::string, std::unique_ptr<KernelRecorder>> kernel_recorders_;
  // Before the impls, so destroyed after them: impls from outside bitcheck free their device
  // memory through their backend.
  std::map<std::string, std::unique_ptr<DeviceBackend>> device_backends_;
  std::map<std::string, std::vector<std::unique_ptr<Impl>>> impls_;
  std::map<std::string, std::pair<bool, std::string>> backends_;
  std::vector<RunHook> run_hooks_;
};

}  // namespace bitcheck
