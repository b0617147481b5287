// Sweep specs (sweeps/*.json): which ops, impls, dtypes, passes, shapes, batch sizes, layouts and
// seeds to run, with defaults and per-op overrides; command-line filters; expansion into cases.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/op.h"
#include "spec/contract.h"

namespace bitcheck {

struct OpSweep {
  std::string op;
  std::vector<std::string> impls;  // empty = every registered impl of the op
  std::vector<std::string> dtypes;
  std::vector<std::string> passes;
  bool passes_named = false;  // the entry or the spec's defaults name its passes
  std::vector<std::string> layouts;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> batches;
  // "batches": "switch-points" (or the string among the numbers): each side of the switch points
  // of the impls under test, at most `switch_budget` batch values per shape, none above
  // `switch_max_batch`.
  bool switch_points = false;
  int switch_budget = 12;
  std::int64_t switch_max_batch = 4096;
  // Paths forced on every call, one case per path and impl declaring it (PathDecl::forced_by);
  // empty: the impls pick their paths.
  std::vector<std::string> force_paths;
  std::vector<Dims> shapes;
  // TP sizes ("tp": [1, 2, 4]): every impl runs at tp = 1; the impls that run on several ranks
  // (Impl::tensor_parallelism) also at each larger tp.
  std::vector<int> tps = {1};
  int repeats = 2;
  std::int64_t alone_rows = 64;
  double special_values = 0;  // rate of special input values (0 = off)
  // Token-id distribution of the cases whose op has token-id inputs; the others stay uniform.
  IdDistribution ids = IdDistribution::uniform;
};

struct SweepSpec {
  std::string source;
  std::string description;
  std::vector<OpSweep> ops;
};

// Command-line filters and overrides; empty means "as the spec says".
struct SweepOverrides {
  std::vector<std::string> ops;  // "all" or names
  std::vector<std::string> impls;
  std::vector<std::string> dtypes;
  std::vector<std::string> passes;
  // The passes of the entries that name none (neither they nor the spec's defaults); empty: both.
  // `bitcheck bench` times the forward unless an entry asks for its backward.
  std::vector<std::string> unnamed_passes;
  std::vector<std::string> layouts;
  std::vector<std::int64_t> batches;
  std::vector<std::uint64_t> seeds;
  std::string backend = "auto";  // auto | cpu | cuda
  std::optional<int> repeats;
  std::optional<double> special_values;  // --special-values[-rate]: a rate in [0, 0.5], 0 = off
  std::optional<std::string> ids;        // --ids: uniform, zipf or few
  std::vector<int> tps;                  // --tp: the TP sizes of every entry
  int shard_index = 0;                   // --shard i/n: run the cases whose index is i modulo n
  int shard_count = 1;
  // --shard-queue FILE (the children of --devices): instead of a fixed share, a shard takes the
  // next unit of work (case_units, most expensive first) from a counter in FILE shared by all
  // shards, until none is left; expand_cases then returns every case.
  std::string shard_queue;
  // --skip-done REPORT: case ids already checked in earlier (e.g. interrupted) reports; they are
  // dropped before sharding, so the shards split what is left.
  std::set<std::string> skip_ids;
  // --costs REPORT: each case's measured seconds in an earlier run (the last night's), which
  // case_units takes over its estimate; cases the report lacks get their estimate scaled by the
  // measured / estimated ratio of those it has.
  std::map<std::string, double> measured_seconds;
  // The same report's peak host memory of each case (timings.host_peak_bytes): with several
  // shards, a case that needs more than the host has available runs alone (sweep/host_gate.h).
  std::map<std::string, std::uint64_t> measured_host_bytes;
};

SweepSpec parse_sweep_spec(const nlohmann::json& document, const std::string& file,
                           const Registry& registry, const Contract& contract);
SweepSpec load_sweep_spec(const std::string& path, const Registry& registry,
                          const Contract& contract);
SweepSpec load_embedded_sweep_spec(const Registry& registry, const Contract& contract);
const char* embedded_sweep_spec_json();

// Validates overrides (BadInput naming the flag) and applies them.
SweepSpec apply_overrides(SweepSpec spec, const SweepOverrides& overrides, const Registry& registry,
                          const Contract& contract);

// The relative cost --shard balances: a fixed part per case plus one proportional to the bytes of
// the case's tensors.
double estimated_case_cost(const CaseSpec& c, const Registry& registry);

// Units of work for `workers` parallel workers: the cases (indices into `cases`) of one input
// group, cut into consecutive runs where a group would cost more than a worker's share; with the
// estimated cost of each. Static shards and the shared queue both hand out whole units.
struct CaseUnit {
  std::vector<std::size_t> members;
  double cost = 0;
};
// `measured_seconds` (SweepOverrides::measured_seconds) replaces the estimates it covers.
std::vector<CaseUnit> case_units(const std::vector<CaseSpec>& cases, const Registry& registry,
                                 int workers,
                                 const std::map<std::string, double>& measured_seconds = {});

// The cartesian product, in spec order. Impls of an unavailable backend still yield cases (to be
// skipped with the backend's reason) unless the backend was filtered out explicitly.
std::vector<CaseSpec> expand_cases(const SweepSpec& spec, const Registry& registry,
                                   const SweepOverrides& overrides);

// The batch values "batches": "switch-points" gives for one shape: 1 and both sides (M - 1, M) of
// switch points of the impls (a point whose two sides do not fit the budget is left out), first
// those reaching a path not yet seen, then a transition not yet seen, then the rest spread
// evenly, until `budget` values. expand_cases lists the controls' points first.
std::vector<std::int64_t> switch_point_batches(const std::vector<std::vector<SwitchPoint>>& points,
                                               int budget);

}  // namespace bitcheck
