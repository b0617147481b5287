// Sweep-spec parsing, override validation and case expansion.
#include "spec/spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_input.h"
#include "core/layout_names.h"
#include "core/special_values.h"

namespace bitcheck {
namespace {

const char* const embedded_spec_label = "embedded:sweeps/default.json";
const char* const command_line = "command line";
constexpr std::int64_t max_batch = 1 << 20;
constexpr std::int64_t max_dim = 1 << 24;

bool contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// The names of `list` that `wanted` also names, in the order of `list`.
std::vector<std::string> intersection(const std::vector<std::string>& list,
                                      const std::vector<std::string>& wanted) {
  std::vector<std::string> kept;
  for (const auto& name : list) {
    if (contains(wanted, name)) kept.push_back(name);
  }
  return kept;
}

// A generic layout, or one of the op's own (any op's, where the op is not known yet: defaults).
bool is_accepted_layout(const Registry& registry, const OpDef* op, const std::string& name) {
  if (is_known_layout(name)) return true;
  for (const OpDef* candidate : registry.ops()) {
    if ((!op || candidate == op) && contains(candidate->layout_names, name)) return true;
  }
  return false;
}

void check_dtype(const Contract& contract, const std::string& dtype, const JsonCursor& at) {
  if (!contract.knows_dtype(dtype)) {
    at.fail("a dtype named in the contract (bf16, fp16, fp32, fp8), got \"" + dtype + "\"");
  }
}

std::vector<std::string> parse_names(
    const JsonCursor& cursor,
    const std::function<void(const std::string&, const JsonCursor&)>& check) {
  std::vector<std::string> names;
  if (cursor.node().is_string()) {
    names.push_back(cursor.as_string());
    check(names.back(), cursor);
    return names;
  }
  for (const auto& item : cursor.items()) {
    names.push_back(item.as_string());
    check(names.back(), item);
  }
  if (names.empty()) cursor.fail("a non-empty list");
  return names;
}

// Reads the fields shared by "defaults" and each op entry into `sweep`.
void parse_common(const JsonCursor& node, const Registry& registry, const Contract& contract,
                  const OpDef* op, OpSweep& sweep) {
  if (auto impls = node.find("impls")) {
    if (impls->node().is_string() && impls->as_string() == "all") {
      sweep.impls.clear();
    } else {
      sweep.impls = parse_names(*impls, [&](const std::string& name, const JsonCursor& at) {
        if (op && !registry.find_impl(op->name, name)) {
          std::string known;
          for (Impl* impl : registry.impls(op->name))
            known += (known.empty() ? "" : ", ") + impl->name();
          at.fail("an impl of " + op->name + " (" + known + "), got \"" + name + "\"");
        }
      });
    }
  }
  if (auto dtypes = node.find("dtypes")) {
    sweep.dtypes = parse_names(*dtypes, [&](const std::string& name, const JsonCursor& at) {
      check_dtype(contract, name, at);
    });
  }
  if (auto passes = node.find("passes")) {
    sweep.passes = parse_names(*passes, [](const std::string& name, const JsonCursor& at) {
      if (!parse_pass(name)) at.fail("\"forward\" or \"backward\", got \"" + name + "\"");
    });
    sweep.passes_named = true;
  }
  if (auto layouts = node.find("layouts")) {
    sweep.layouts = parse_names(*layouts, [&](const std::string& name, const JsonCursor& at) {
      if (!is_accepted_layout(registry, op, name))
        at.fail(
            "a layout (alone, batch, shuffled, pad_right, pad_left, ragged, microbatch, or one of "
            "the op's own), got \"" +
            name + "\"");
    });
  }
  if (auto seeds = node.find("seeds")) {
    sweep.seeds.clear();
    for (const auto& item : seeds->items()) {
      sweep.seeds.push_back(static_cast<std::uint64_t>(item.as_int(0, INT64_MAX)));
    }
    if (sweep.seeds.empty()) seeds->fail("a non-empty list of seeds");
  }
  if (auto batches = node.find("batches")) {
    sweep.batches.clear();
    sweep.switch_points = false;
    const std::string expected =
        "a non-empty list of batch sizes in [1, " + std::to_string(max_batch) +
        "], or \"switch-points\" (each side of the impls' switch points), alone or in the list";
    auto item_of = [&](const JsonCursor& item) {
      if (item.node().is_string()) {
        if (item.as_string() != "switch-points") item.fail(expected);
        sweep.switch_points = true;
      } else if (item.node().is_number_integer()) {
        sweep.batches.push_back(item.as_int(1, max_batch));
      } else {
        item.fail(expected);
      }
    };
    if (batches->node().is_array()) {
      for (const auto& item : batches->items()) item_of(item);
    } else {
      item_of(*batches);
    }
    if (sweep.batches.empty() && !sweep.switch_points) batches->fail(expected);
  }
  if (auto budget = node.find("switch_budget"))
    sweep.switch_budget = static_cast<int>(budget->as_int(2, 256));
  if (auto limit = node.find("switch_max_batch"))
    sweep.switch_max_batch = limit->as_int(2, max_batch);
  if (auto forced = node.find("force_paths")) {
    sweep.force_paths = parse_names(*forced, [&](const std::string& name, const JsonCursor& at) {
      if (!op) at.fail("force_paths in an op entry, not in the defaults");
      std::string known;
      for (Impl* impl : registry.impls(op->name)) {
        for (const PathDecl& decl : impl->paths()) {
          if (!decl.forced()) continue;
          if (decl.name == name) return;
          if (known.find(decl.name) == std::string::npos)
            known += (known.empty() ? "" : ", ") + decl.name;
        }
      }
      at.fail("a path an impl of " + op->name + " declares as forced (" +
              (known.empty() ? std::string("none") : known) + "), got \"" + name + "\"");
    });
  }
  if (auto tps = node.find("tp")) {
    sweep.tps.clear();
    auto tp_of = [&](const JsonCursor& item) {
      const int tp = static_cast<int>(item.as_int(1, max_tensor_parallel));
      if (!is_valid_tp(tp)) {
        item.fail(valid_tp_choices() + " (ranks; the fixed-order reductions split into " +
                  std::to_string(max_tensor_parallel) + " chunks), got " + std::to_string(tp));
      }
      if (std::find(sweep.tps.begin(), sweep.tps.end(), tp) == sweep.tps.end())
        sweep.tps.push_back(tp);
    };
    if (tps->node().is_array()) {
      for (const auto& item : tps->items()) tp_of(item);
    } else {
      tp_of(*tps);
    }
    if (sweep.tps.empty()) tps->fail("a non-empty list of TP sizes (" + valid_tp_choices() + ")");
  }
  if (auto repeats = node.find("repeats"))
    sweep.repeats = static_cast<int>(repeats->as_int(2, 100));
  // At least 2: the alone sample always holds the first and the last row.
  if (auto alone = node.find("alone_rows")) sweep.alone_rows = alone->as_int(2, max_batch);
  if (auto ids = node.find("ids")) {
    const std::string name = ids->as_string();
    auto distribution = parse_id_distribution(name);
    if (!distribution) {
      ids->fail(id_distribution_choices() + " (how token ids are drawn), got \"" + name + "\"");
    }
    sweep.ids = *distribution;
  }
  if (auto special = node.find("special_values")) {
    const std::string expected =
        "true, false or a rate in [0, " + special_value_rate_string(max_special_value_rate) +
        "] (the fraction of float row-input elements made special; 0 = off), got ";
    if (special->node().is_boolean()) {
      sweep.special_values = special->as_bool() ? default_special_value_rate : 0.0;
    } else if (!special->node().is_number()) {
      special->fail(expected + json_type_name(special->node()));
    } else {
      double rate = special->as_number();
      if (!(rate >= 0.0 && rate <= max_special_value_rate))
        special->fail(expected + special_value_rate_string(rate));
      sweep.special_values = rate;
    }
  }
}

// Whether a case has a token-id input for CaseSpec::ids to shape.
bool has_token_ids(const OpDef& op, const CaseSpec& c) {
  if (!op.tensors) return false;
  try {
    for (const TensorDecl& decl : op.tensors(c)) {
      if (decl.generator == Generator::token_id) return true;
    }
  } catch (const std::exception&) {
    // A shape the op refuses: the case is skipped, nothing is drawn.
  }
  return false;
}

// Whether the entry's cases have a token-id input for an id distribution to shape.
bool draws_token_ids(const OpDef& op, const OpSweep& sweep) {
  for (const auto& dims : sweep.shapes) {
    for (const auto& pass_name : sweep.passes) {
      CaseSpec c;
      c.op = op.name;
      c.dtype_name = sweep.dtypes.empty() ? "fp32" : sweep.dtypes.front();
      c.dtype = parse_dtype(c.dtype_name).value_or(DType::fp32);
      c.pass = parse_pass(pass_name).value_or(Pass::forward);
      c.dims = dims;
      if (has_token_ids(op, c)) return true;
    }
  }
  return false;
}

std::vector<Dims> parse_shapes(const JsonCursor& shapes, const OpDef& op) {
  std::vector<Dims> result;
  for (const auto& shape : shapes.items()) {
    shape.expect_object();
    Dims dims;
    for (const auto& key : shape.keys()) {
      const bool optional = contains(op.optional_dim_names, key);
      if (!optional && !contains(op.dim_names, key)) {
        std::string names;
        for (const auto& name : op.dim_names) names += (names.empty() ? "" : ", ") + name;
        for (const auto& name : op.optional_dim_names)
          names += (names.empty() ? "" : ", ") + name + " (optional)";
        shape.at(key).fail("no such dim for " + op.name + " (its dims: " + names + ")");
      }
      const std::int64_t value = shape.at(key).as_int(optional ? 0 : 1, max_dim);
      if (value > 0) dims[key] = value;
    }
    for (const auto& name : op.dim_names) {
      if (!dims.count(name)) shape.at(name);  // throws: missing field
    }
    if (op.dims_problem) {
      if (auto problem = op.dims_problem(dims)) {
        (shape.find(problem->first) ? shape.at(problem->first) : shape).fail(problem->second);
      }
    }
    result.push_back(dims);
  }
  if (result.empty()) shapes.fail("a non-empty list of shapes");
  return result;
}

// The impls of an entry that run on several ranks, at each TP size above 1: every dim they split
// must divide by it (BadInput naming the file, the tp field and the shape).
void check_tp_splits(const Registry& registry, const OpSweep& sweep, const std::string& file,
                     const std::string& field) {
  for (int tp : sweep.tps) {
    if (tp == 1) continue;
    for (const Impl* impl : registry.impls(sweep.op)) {
      if (!sweep.impls.empty() && !contains(sweep.impls, impl->name())) continue;
      const TensorParallelism parallelism = impl->tensor_parallelism();
      if (!parallelism.supports(tp)) continue;
      for (const Dims& dims : sweep.shapes) {
        if (auto problem = parallelism.split_problem(dims, tp)) {
          throw BadInput(file, field,
                         "TP sizes that divide the dims " + impl->name() + " splits over ranks: " +
                             *problem + " in the shape " + dims_string(dims));
        }
      }
    }
  }
}

}  // namespace

SweepSpec parse_sweep_spec(const nlohmann::json& document, const std::string& file,
                           const Registry& registry, const Contract& contract) {
  JsonCursor root(document, file);
  root.expect_object();
  root.allow_only({"schema_version", "description", "defaults", "ops", "plugins", "py_impls"});
  root.at("schema_version").as_int(1, 1);
  // Loaded before the spec is read (bitcheck sweep, external_impls_of_spec); checked here.
  for (const char* field : {"plugins", "py_impls"}) {
    if (auto list = root.find(field)) list->as_string_list();
  }
  SweepSpec spec;
  spec.source = file;
  if (auto description = root.find("description")) spec.description = description->as_string();

  OpSweep defaults;
  defaults.dtypes = {"bf16", "fp32", "fp16"};
  defaults.passes = {"forward", "backward"};
  defaults.layouts = known_layouts();
  defaults.seeds = {1};
  defaults.batches = {1, 2, 3, 7, 16, 33};
  if (auto node = root.find("defaults")) {
    node->allow_only({"impls", "dtypes", "passes", "layouts", "seeds", "batches", "repeats",
                      "alone_rows", "special_values", "ids", "switch_budget", "switch_max_batch",
                      "tp"});
    parse_common(*node, registry, contract, nullptr, defaults);
  }

  JsonCursor ops = root.at("ops");
  ops.expect_object();
  if (ops.keys().empty()) ops.fail("at least one op");
  for (const auto& name : ops.keys()) {
    JsonCursor entry = ops.at(name);
    // An entry is keyed by its op's name, or by a label with the op named in "op" (so one op can
    // have several grids, e.g. a forward grid and a smaller backward grid).
    std::string op_name = name;
    if (auto field = entry.find("op")) op_name = field->as_string();
    const OpDef* op = registry.find_op(op_name);
    if (!op) {
      std::string known;
      for (const OpDef* candidate : registry.ops())
        known += (known.empty() ? "" : ", ") + candidate->name;
      (entry.find("op") ? entry.at("op") : entry)
          .fail("a registered op (" + known + "), got \"" + op_name + "\"");
    }
    entry.allow_only({"op", "description", "impls", "dtypes", "passes", "layouts", "seeds",
                      "batches", "repeats", "alone_rows", "special_values", "ids", "shapes",
                      "switch_budget", "switch_max_batch", "force_paths", "tp"});
    OpSweep sweep = defaults;
    sweep.op = op_name;
    parse_common(entry, registry, contract, op, sweep);
    if (!entry.find("impls")) {
      // Impls inherited from the defaults must exist for this op too.
      for (std::size_t i = 0; i < sweep.impls.size(); ++i) {
        if (registry.find_impl(op_name, sweep.impls[i])) continue;
        throw BadInput(file, "$.defaults.impls[" + std::to_string(i) + "]",
                       "an impl of every op the spec lists (" + op_name + " has no impl \"" +
                           sweep.impls[i] + "\")");
      }
    }
    sweep.shapes = parse_shapes(entry.at("shapes"), *op);
    check_tp_splits(registry, sweep, file,
                    entry.find("tp") ? "$.ops." + name + ".tp" : "$.defaults.tp");
    // An op entry that asks for an id distribution its op has no ids for is a mistake; one
    // inherited from the defaults applies to the ops that have token ids and leaves the others.
    if (auto ids = entry.find("ids")) {
      if (sweep.ids != IdDistribution::uniform && !draws_token_ids(*op, sweep)) {
        ids->fail("\"uniform\": " + op_name +
                  " has no token-id input (such as embedding's ids or logprob's targets) for \"" +
                  to_string(sweep.ids) + "\" to shape");
      }
    }
    spec.ops.push_back(sweep);
  }
  return spec;
}

SweepSpec load_sweep_spec(const std::string& path, const Registry& registry,
                          const Contract& contract) {
  return parse_sweep_spec(load_json_file(path), path, registry, contract);
}

SweepSpec load_embedded_sweep_spec(const Registry& registry, const Contract& contract) {
  return parse_sweep_spec(parse_json_text(embedded_sweep_spec_json(), embedded_spec_label),
                          embedded_spec_label, registry, contract);
}

SweepSpec apply_overrides(SweepSpec spec, const SweepOverrides& overrides, const Registry& registry,
                          const Contract& contract) {
  auto fail = [](const std::string& flag, const std::string& expected) {
    throw BadInput(command_line, flag, expected);
  };
  for (const auto& op : overrides.ops) {
    if (op != "all" && !registry.find_op(op))
      fail("--op", "\"all\" or a registered op (see `bitcheck list`), got \"" + op + "\"");
  }
  for (const auto& impl : overrides.impls) {
    bool found = false;
    for (const OpDef* op : registry.ops()) found = found || registry.find_impl(op->name, impl);
    if (!found) fail("--impl", "an impl name (see `bitcheck list`), got \"" + impl + "\"");
  }
  for (const auto& dtype : overrides.dtypes) {
    if (!contract.knows_dtype(dtype))
      fail("--dtype",
           "a dtype named in the contract (bf16, fp16, fp32, fp8), got \"" + dtype + "\"");
  }
  for (const auto& pass : overrides.passes) {
    if (!parse_pass(pass)) fail("--pass", "forward or backward, got \"" + pass + "\"");
  }
  for (const auto& layout : overrides.layouts) {
    if (!is_accepted_layout(registry, nullptr, layout))
      fail("--layout", "a layout name, got \"" + layout + "\"");
  }
  for (std::int64_t batch : overrides.batches) {
    if (batch <= 0 || batch > max_batch)
      fail("--batch",
           "a batch size in [1, " + std::to_string(max_batch) + "], got " + std::to_string(batch));
  }
  if (overrides.backend != "auto" && overrides.backend != "cpu" && overrides.backend != "cuda") {
    fail("--backend", "auto, cpu or cuda, got \"" + overrides.backend + "\"");
  }
  if (overrides.repeats && *overrides.repeats < 2)
    fail("--repeats", "at least 2 (the determinism check compares two runs)");
  if (overrides.special_values &&
      !(*overrides.special_values >= 0.0 && *overrides.special_values <= max_special_value_rate)) {
    fail("--special-values-rate", "a rate in [0, " +
                                      special_value_rate_string(max_special_value_rate) +
                                      "] (0 turns special values off), got " +
                                      special_value_rate_string(*overrides.special_values));
  }
  std::optional<IdDistribution> ids;
  if (overrides.ids) {
    ids = parse_id_distribution(*overrides.ids);
    if (!ids) fail("--ids", id_distribution_choices() + ", got \"" + *overrides.ids + "\"");
  }
  for (int tp : overrides.tps) {
    if (!is_valid_tp(tp)) fail("--tp", valid_tp_choices() + ", got " + std::to_string(tp));
  }
  if (overrides.shard_count < 1 || overrides.shard_index < 0 ||
      overrides.shard_index >= overrides.shard_count) {
    fail("--shard", "i/n with 0 <= i < n");
  }

  bool all_ops = overrides.ops.empty() || contains(overrides.ops, "all");
  std::vector<OpSweep> kept;
  for (auto& sweep : spec.ops) {
    if (!all_ops && !contains(overrides.ops, sweep.op)) continue;
    // --dtype and --pass narrow an entry to what it already runs: an entry that runs only the
    // backward (matmul-backward) is left out by --pass forward instead of turning into a second
    // forward entry over its shapes, which ran duplicate cases (and put one case in two shards).
    if (!overrides.dtypes.empty()) sweep.dtypes = intersection(sweep.dtypes, overrides.dtypes);
    if (!sweep.passes_named && !overrides.unnamed_passes.empty())
      sweep.passes = overrides.unnamed_passes;
    if (!overrides.passes.empty()) sweep.passes = intersection(sweep.passes, overrides.passes);
    if (sweep.dtypes.empty() || sweep.passes.empty()) continue;
    if (!overrides.layouts.empty()) sweep.layouts = overrides.layouts;
    if (!overrides.batches.empty()) {
      sweep.batches = overrides.batches;
      sweep.switch_points = false;
    }
    if (!overrides.seeds.empty()) sweep.seeds = overrides.seeds;
    if (overrides.repeats) sweep.repeats = *overrides.repeats;
    if (overrides.special_values) sweep.special_values = *overrides.special_values;
    if (ids) sweep.ids = *ids;
    if (!overrides.tps.empty()) {
      sweep.tps = overrides.tps;
      check_tp_splits(registry, sweep, command_line, "--tp");
    }
    kept.push_back(sweep);
  }
  if (kept.empty()) {
    if (!overrides.dtypes.empty() || !overrides.passes.empty()) {
      fail("--op/--dtype/--pass",
           "an op, dtype and pass that some entry of the sweep spec " + spec.source + " runs");
    }
    fail("--op", "an op that the sweep spec " + spec.source + " lists");
  }
  if (ids && *ids != IdDistribution::uniform &&
      std::none_of(kept.begin(), kept.end(), [&](const OpSweep& sweep) {
        return draws_token_ids(*registry.find_op(sweep.op), sweep);
      })) {
    fail("--ids", "an op with token-id inputs among the ops run (embedding, logprob, ...) for \"" +
                      *overrides.ids + "\" to shape");
  }
  spec.ops = kept;
  return spec;
}

double estimated_case_cost(const CaseSpec& c, const Registry& registry) {
  // A case's time is a fixed part (layouts, launches, the reference on sampled rows: about a
  // second on a GPU host) plus a part that grows with the bytes its tensors hold, which every
  // layout generates, moves, copies back and compares (measured on an H200 host: ~6 s per GiB,
  // e.g. 20 s for a 128256 x 4096 matmul backward whose weight and fp32 dW are 3 GiB). The
  // product of the dims alone made a 4096-row case weigh 4096 one-row cases, which left shards of
  // many small cases running long after the others.
  constexpr double fixed_part = 1.0, per_gib = 6.0;
  const OpDef* op = registry.find_op(c.op);
  if (op && op->parts) {
    // A composed case (the chain) costs what its calls cost: its own tensors are a small part.
    double sum = 0;
    try {
      for (const CaseSpec& part : op->parts(c)) sum += estimated_case_cost(part, registry);
    } catch (const std::exception&) {
      return fixed_part;  // a shape the op refuses: skipped at once
    }
    return sum;
  }
  double bytes = 0;
  if (op && op->tensors) {
    try {
      const std::int64_t rows = op->logical_rows ? op->logical_rows(c) : c.rows;
      for (const TensorDecl& decl : op->tensors(c)) {
        double elements = 1;
        for (std::int64_t extent : decl.shape) elements *= static_cast<double>(extent);
        if (decl.role == TensorRole::row_input || decl.role == TensorRole::row_output) {
          elements *= static_cast<double>(rows);
        }
        bytes += elements * static_cast<double>(dtype_size(decl.dtype));
      }
    } catch (const std::exception&) {
      bytes = 0;  // a shape the op refuses: skipped at once
    }
  }
  return fixed_part + per_gib * bytes / double(1ull << 30);
}

namespace {
bool declares_forced_path(const Impl& impl, const std::string& path) {
  for (const PathDecl& decl : impl.paths())
    if (decl.forced() && decl.name == path) return true;
  return false;
}
}  // namespace

std::vector<std::int64_t> switch_point_batches(const std::vector<std::vector<SwitchPoint>>& points,
                                               int budget) {
  std::set<std::int64_t> batches = {1};
  std::vector<std::set<std::string>> seen_paths(points.size());
  std::vector<std::set<std::pair<std::string, std::string>>> seen_moves(points.size());
  std::vector<std::vector<bool>> taken(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    taken[i].assign(points[i].size(), false);
    if (!points[i].empty()) seen_paths[i].insert(points[i].front().from);  // M = 1 runs it
  }
  auto full = [&] { return batches.size() >= static_cast<std::size_t>(budget); };
  // A point is taken with both its sides or not at all: one side alone crosses nothing.
  auto fits = [&](const SwitchPoint& point) {
    const std::size_t added =
        (batches.count(point.rows - 1) ? 0 : 1) + (batches.count(point.rows) ? 0 : 1);
    return batches.size() + added <= static_cast<std::size_t>(budget);
  };
  auto take = [&](std::size_t i, std::size_t j) {
    const SwitchPoint& point = points[i][j];
    taken[i][j] = true;
    seen_paths[i].insert(point.from);
    seen_paths[i].insert(point.to);
    seen_moves[i].insert({point.from, point.to});
    batches.insert(point.rows - 1);
    batches.insert(point.rows);
  };
  // Rounds over the impls, one point each per round, so every impl gets its first new path
  // before any gets its second.
  auto rounds = [&](auto wanted) {
    bool progress = true;
    while (progress && !full()) {
      progress = false;
      for (std::size_t i = 0; i < points.size() && !full(); ++i) {
        for (std::size_t j = 0; j < points[i].size(); ++j) {
          if (taken[i][j] || !wanted(i, points[i][j]) || !fits(points[i][j])) continue;
          take(i, j);
          progress = true;
          break;
        }
      }
    }
  };
  rounds([&](std::size_t i, const SwitchPoint& p) {
    return !seen_paths[i].count(p.to) || !seen_paths[i].count(p.from);
  });
  rounds([&](std::size_t i, const SwitchPoint& p) { return !seen_moves[i].count({p.from, p.to}); });
  // The rest spread evenly: every k-th remaining point of each impl.
  for (std::size_t i = 0; i < points.size() && !full(); ++i) {
    std::vector<std::size_t> rest;
    for (std::size_t j = 0; j < points[i].size(); ++j)
      if (!taken[i][j]) rest.push_back(j);
    const std::size_t room = static_cast<std::size_t>(budget) - batches.size();
    const std::size_t share = std::max<std::size_t>(1, room / 2 / (points.size() - i));
    const std::size_t step = std::max<std::size_t>(1, rest.size() / share);
    for (std::size_t k = step / 2; k < rest.size() && !full(); k += step)
      if (fits(points[i][rest[k]])) take(i, rest[k]);
  }
  return {batches.begin(), batches.end()};
}

std::vector<CaseSpec> expand_cases(const SweepSpec& spec, const Registry& registry,
                                   const SweepOverrides& overrides) {
  std::vector<CaseSpec> cases;
  std::int64_t next_index = 0;
  for (const auto& sweep : spec.ops) {
    const OpDef& op = *registry.find_op(sweep.op);
    std::vector<Impl*> impls;
    if (sweep.impls.empty()) {
      impls = registry.impls(sweep.op);
    } else {
      for (const auto& name : sweep.impls) impls.push_back(registry.find_impl(sweep.op, name));
    }
    // An impl that runs on several ranks joins an entry that asks for a tp above 1, or names it.
    const bool wants_ranks =
        std::any_of(sweep.tps.begin(), sweep.tps.end(), [](int tp) { return tp > 1; });
    std::vector<Impl*> selected;
    for (Impl* impl : impls) {
      if (!wants_ranks && sweep.impls.empty() && impl->tensor_parallelism().max_tp > 1) continue;
      if (!overrides.impls.empty() && !contains(overrides.impls, impl->name())) continue;
      if (overrides.backend != "auto" && impl->backend() != overrides.backend) continue;
      selected.push_back(impl);
    }
    // The impl varies fastest: the impls of one input group are adjacent, so the runner computes
    // their shared FP32 reference once.
    for (const auto& dtype_name : sweep.dtypes) {
      for (const auto& pass_name : sweep.passes) {
        for (const auto& dims : sweep.shapes) {
          std::vector<std::int64_t> batches = sweep.batches;
          if (sweep.switch_points) {
            CaseSpec shape;
            shape.op = sweep.op;
            shape.dtype_name = dtype_name;
            shape.dtype = parse_dtype(dtype_name).value_or(DType::fp32);
            shape.pass = *parse_pass(pass_name);
            shape.dims = dims;
            // The controls' points first: a control whose switch no batch reaches cannot drift.
            std::vector<std::vector<SwitchPoint>> points;
            for (bool controls : {true, false}) {
              for (Impl* impl : selected) {
                if (!impl->supports(shape.pass) || impl->expected_to_drift(shape.pass) != controls)
                  continue;
                shape.impl = impl->name();
                points.push_back(impl->switch_points(shape, sweep.switch_max_batch));
              }
            }
            for (std::int64_t rows : switch_point_batches(points, sweep.switch_budget))
              if (std::find(batches.begin(), batches.end(), rows) == batches.end())
                batches.push_back(rows);
          }
          std::vector<std::string> forced = sweep.force_paths;
          if (forced.empty()) forced.push_back("");
          for (std::int64_t rows : batches) {
            for (std::uint64_t seed : sweep.seeds) {
              for (const std::string& path : forced) {
                for (int tp : sweep.tps) {
                  for (Impl* impl : selected) {
                    if (!path.empty() && !declares_forced_path(*impl, path)) continue;
                    if (!impl->tensor_parallelism().supports(tp)) continue;
                    CaseSpec c;
                    c.op = sweep.op;
                    c.impl = impl->name();
                    c.dtype_name = dtype_name;
                    c.dtype = parse_dtype(dtype_name).value_or(DType::fp32);
                    c.pass = *parse_pass(pass_name);
                    c.dims = dims;
                    c.rows = rows;
                    c.seed = seed;
                    c.layouts = sweep.layouts;
                    c.repeats = sweep.repeats;
                    c.alone_rows = sweep.alone_rows;
                    c.special_values = sweep.special_values;
                    // Only a case with token ids carries a distribution (and names it in its id).
                    if (sweep.ids != IdDistribution::uniform && has_token_ids(op, c))
                      c.ids = sweep.ids;
                    c.forced_path = path;
                    c.tp = tp;
                    c.index = next_index++;
                    cases.push_back(c);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // Two entries can still describe one case (the same shape and M in two entries, or --batch
  // giving two entries the same M): it runs once, in the first entry's place, so no case runs
  // twice or sits in two shards. It runs every layout either entry asks for (an entry that adds
  // the graph layout to an op's cases must not lose the cases another entry already lists) and
  // the larger repeat count; the rest is the first entry's.
  {
    std::map<std::string, std::size_t> first;
    std::vector<CaseSpec> kept;
    for (CaseSpec& c : cases) {
      auto [at, inserted] = first.emplace(c.id(), kept.size());
      if (inserted) {
        kept.push_back(std::move(c));
        continue;
      }
      CaseSpec& earlier = kept[at->second];
      for (const std::string& layout : c.layouts) {
        if (std::find(earlier.layouts.begin(), earlier.layouts.end(), layout) ==
            earlier.layouts.end())
          earlier.layouts.push_back(layout);
      }
      earlier.repeats = std::max(earlier.repeats, c.repeats);
    }
    cases = std::move(kept);
    for (std::size_t i = 0; i < cases.size(); ++i) cases[i].index = static_cast<std::int64_t>(i);
  }
  if (!overrides.skip_ids.empty()) {
    cases.erase(
        std::remove_if(cases.begin(), cases.end(),
                       [&](const CaseSpec& c) { return overrides.skip_ids.count(c.id()) > 0; }),
        cases.end());
  }
  if (overrides.shard_count <= 1 || !overrides.shard_queue.empty()) return cases;
  // Static shards: the units (see case_units) from the most expensive, each to the least-loaded
  // shard. Deterministic, so every shard computes the same plan.
  const std::vector<CaseUnit> units =
      case_units(cases, registry, overrides.shard_count, overrides.measured_seconds);
  std::vector<std::size_t> order(units.size());
  for (std::size_t u = 0; u < order.size(); ++u) order[u] = u;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return units[a].cost > units[b].cost; });
  std::vector<double> load(static_cast<std::size_t>(overrides.shard_count), 0.0);
  std::vector<bool> mine(cases.size(), false);
  for (std::size_t u : order) {
    auto lightest =
        static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[lightest] += units[u].cost;
    if (static_cast<int>(lightest) == overrides.shard_index)
      for (std::size_t i : units[u].members) mine[i] = true;
  }
  std::vector<CaseSpec> shard;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (mine[i]) shard.push_back(cases[i]);  // spec order within the shard
  }
  return shard;
}

std::vector<CaseUnit> case_units(const std::vector<CaseSpec>& cases, const Registry& registry,
                                 int workers,
                                 const std::map<std::string, double>& measured_seconds) {
  // Units are input groups (the impls of one group share inputs and a reference, computed once by
  // whoever runs the group, so a group stays together as far as balance allows). A group costing
  // more than a worker's share (the chain's impls, say) is cut into that many runs of consecutive
  // cases, each paying the reference once, so it cannot hold up the whole sweep.
  std::vector<double> cost(cases.size());
  std::vector<bool> measured(cases.size(), false);
  double measured_total = 0, estimated_of_measured = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cost[i] = estimated_case_cost(cases[i], registry);
    const auto found = measured_seconds.find(cases[i].id());
    if (found == measured_seconds.end()) continue;
    measured[i] = true;
    estimated_of_measured += cost[i];
    measured_total += found->second;
    cost[i] = found->second;
  }
  // The cases no earlier run measured: their estimates in the measured cases' units.
  const double scale = measured_total > 0 && estimated_of_measured > 0
                           ? measured_total / estimated_of_measured
                           : 1.0;
  double total_cost = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (!measured[i]) cost[i] *= scale;
    total_cost += cost[i];
  }
  const double share = total_cost / static_cast<double>(std::max(workers, 1));
  std::vector<std::vector<std::size_t>> members;  // cases of each group, in spec order
  {
    std::map<std::string, std::size_t> groups;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      // A composed op's references follow each impl's own outputs: nothing shared to keep together.
      const OpDef* op = registry.find_op(cases[i].op);
      const std::string key = op && op->reference_along ? cases[i].id() : cases[i].input_group();
      auto [it, added] = groups.emplace(key, members.size());
      if (added) members.emplace_back();
      members[it->second].push_back(i);
    }
  }
  std::vector<CaseUnit> units;
  for (const auto& group : members) {
    double whole = 0;
    for (std::size_t i : group) whole += cost[i];
    const auto runs = static_cast<std::size_t>(std::min<double>(
        static_cast<double>(group.size()), std::max(1.0, std::ceil(whole / share))));
    const double per_run = whole / static_cast<double>(runs);
    double filled = 0;
    std::size_t run = 0;
    units.emplace_back();
    for (std::size_t i : group) {
      if (filled >= per_run * static_cast<double>(run + 1) && run + 1 < runs) {
        ++run;
        units.emplace_back();
      }
      units.back().members.push_back(i);
      units.back().cost += cost[i];
      filled += cost[i];
    }
  }
  return units;
}

}  // namespace bitcheck
