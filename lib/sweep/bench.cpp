// `bitcheck bench`: times device impls in one run, interleaved with the library default, and
// writes a cost-of-invariance table (JSON + markdown).
#include "sweep/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "core/backend.h"
#include "core/error.h"
#include "report/bench_cost.h"
#include "report/report.h"
#include "sweep/rank_group.h"
#include "sweep/sweep.h"

namespace bitcheck {
namespace {

struct Row {
  CaseSpec spec;
  std::string impl;
  bool claims_invariance = false;
  std::optional<BenchMeasurement> measurement;
  std::string error;
  double same_bytes_copy_gbps = -1;  // memory-bound points: a copy of the bytes the impl moves
};

// Whether a row is measured against a copy of its bytes: every point of an op without a baseline,
// and the points its impl calls memory-bound.
bool timed_against_copy(const OpDef& op, const BenchMeasurement& measurement) {
  if (measurement.also_against_copy) return true;
  return op.bench_baseline.empty() && op.bench_external_baseline.empty();
}

// The row's bandwidth against the same-bytes copy, into its JSON and its "vs" text.
void describe_copy_fraction(const Row& row, double gbps, nlohmann::json& j, std::string& versus) {
  if (row.same_bytes_copy_gbps <= 0) return;
  j["same_bytes_copy_gbps"] = row.same_bytes_copy_gbps;
  j["fraction_of_same_bytes_copy"] = gbps / row.same_bytes_copy_gbps;
  versus += (versus.empty() ? "" : "; ") +
            printf_number("%.0f%% of same-bytes copy", 100.0 * gbps / row.same_bytes_copy_gbps) +
            " (" + printf_number("%.0f GB/s)", row.same_bytes_copy_gbps);
}

// Benchmarks `impl` for `rounds` rounds, keeping the fastest round's median (machines are shared).
void measure(Impl& impl, const CaseSpec& spec, const BenchSettings& settings, Row& row) {
  try {
    std::optional<BenchMeasurement> result = impl.benchmark(spec, settings);
    if (!result) return;
    if (!row.measurement || result->median_ms < row.measurement->median_ms)
      row.measurement = result;
  } catch (const std::exception& error) {
    row.error = error.what();
  }
}

// The cases at tp > 1: timed by a group of rank processes (one per GPU of --devices), each rank
// running every benchmark of the cases it belongs to; rank 0's times are the rows.
std::vector<Row> time_in_rank_group(const BenchOptions& options, const Registry& registry,
                                    const std::vector<CaseSpec>& cases) {
  SweepOptions group;
  group.spec_path = options.spec_path;
  group.contract_path = options.contract_path;
  // No pass forced: the ranks plan every pass of the entries that name none and run exactly the
  // cases listed for them (run_bench's, the forward of those entries and the passes the others
  // name); forcing the forward here dropped a backward entry's cases from their plan.
  group.overrides = options.overrides;
  group.overrides.backend = "cuda";
  group.argv = options.argv;
  group.devices = options.devices;
  group.rank_bench = true;
  group.bench.warmup = options.warmup;
  group.bench.repeats = options.repeats;
  group.printer = options.printer;
  std::filesystem::create_directories(options.out_dir);
  std::string pattern =
      (std::filesystem::path(options.out_dir) / ".bitcheck-ranks-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a temporary directory in " + options.out_dir);
  const RankGroupRun run = run_rank_group(group, registry, cases, pattern);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const nlohmann::json& entry = run.results[i];
    const Impl* impl = registry.find_impl(cases[i].op, cases[i].impl);
    Row row{cases[i], cases[i].impl, impl->claims_invariance(), std::nullopt, ""};
    if (entry.contains("median_ms")) {
      BenchMeasurement measured;
      measured.median_ms = entry["median_ms"].get<double>();
      measured.min_ms = entry["min_ms"].get<double>();
      measured.flops = entry.value("flops", 0.0);
      measured.bytes_moved = entry.value("bytes_moved", 0.0);
      measured.config = entry.value("config", nlohmann::json());
      row.measurement = measured;
    } else {
      row.error = entry.value("error", entry.value("reason", std::string("not timed")));
    }
    rows.push_back(std::move(row));
  }
  std::error_code ignored;
  std::filesystem::remove_all(pattern, ignored);
  return rows;
}

}  // namespace

int run_bench(const BenchOptions& options, const Registry& registry) {
  SweepOverrides overrides = options.overrides;
  // The forward, unless an entry names its passes (the column-parallel matmul's dX is its
  // backward); --pass still narrows.
  overrides.unnamed_passes = {"forward"};
  overrides.backend = "cuda";
  const SweepPlan plan =
      plan_run(options.spec_path, options.contract_path, overrides, options.run, registry);
  const Contract& contract = plan.contract;
  const std::vector<CaseSpec>& cases = plan.cases;
  if (!registry.backend_available("cuda")) {
    options.printer->note("bitcheck bench: " + registry.backend_reason("cuda"));
    return exit_internal;
  }

  BenchSettings settings;
  settings.warmup = options.warmup;
  settings.repeats = options.repeats;
  const DeviceBackend& device = *registry.device_backend("cuda");
  const double copy_gbps = device.copy_bandwidth_gbps();

  // One group per (op, dtype, pass, shape, M): every impl of the op on that point, interleaved.
  std::map<std::string, std::vector<CaseSpec>> groups;
  std::vector<std::string> order;
  std::vector<CaseSpec> group_cases;
  for (const auto& c : cases) {
    if (contract.dtype_skip_reason(c.dtype_name)) continue;
    if (needs_rank_group(c, registry)) {
      group_cases.push_back(c);
      continue;
    }
    std::string key = c.op + "|" + c.dtype_name + "|" + to_string(c.pass) + "|" +
                      dims_string(c.dims) + "|" + std::to_string(c.rows) + "|tp" +
                      std::to_string(c.tp);
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(c);
  }
  std::vector<Row> rows;
  int failures = 0;
  for (std::size_t g = 0; g < order.size(); ++g) {
    auto& group = groups[order[g]];
    options.printer->progress("[" + std::to_string(g + 1) + "/" + std::to_string(order.size()) +
                              "] " + order[g]);
    std::vector<Row> group_rows;
    for (const auto& c : group) {
      Impl* impl = registry.find_impl(c.op, c.impl);
      if (impl->skip_reason(c)) continue;
      group_rows.push_back({c, c.impl, impl->claims_invariance(), std::nullopt, ""});
    }
    for (int round = 0; round < options.rounds; ++round) {
      for (auto& row : group_rows)
        measure(*registry.find_impl(row.spec.op, row.impl), row.spec, settings, row);
    }
    // Memory-bound points: the yardstick is a device copy of the same bytes, timed alike, in this
    // run.
    for (auto& row : group_rows) {
      if (!row.measurement || !timed_against_copy(*registry.find_op(row.spec.op), *row.measurement))
        continue;
      for (int round = 0; round < options.rounds; ++round) {
        row.same_bytes_copy_gbps =
            std::max(row.same_bytes_copy_gbps,
                     device.copy_bandwidth_gbps(row.measurement->bytes_moved, settings.warmup,
                                                settings.repeats, settings.rotate_bytes));
      }
    }
    for (auto& row : group_rows) {
      if (!row.error.empty()) ++failures;
      if (row.measurement || !row.error.empty()) rows.push_back(row);
    }
  }
  options.printer->end_progress();
  if (!group_cases.empty()) {
    for (Row& row : time_in_rank_group(options, registry, group_cases)) {
      if (!row.error.empty()) ++failures;
      rows.push_back(std::move(row));
    }
  }

  nlohmann::json table = nlohmann::json::array();
  std::ostringstream md;
  md << "| op | dtype | shape | M | tp | impl | median ms | TFLOP/s | GB/s | vs baseline | config "
        "|\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& row : rows) {
    const OpDef* op = registry.find_op(row.spec.op);
    // A row of a forced path is its own row of the table and its own line of the cost table.
    const std::string impl_label =
        row.spec.forced_path.empty() ? row.impl : row.impl + " [" + row.spec.forced_path + "]";
    nlohmann::json j = {{"op", row.spec.op},
                        {"impl", impl_label},
                        {"dtype", row.spec.dtype_name},
                        {"pass", to_string(row.spec.pass)},
                        {"dims", row.spec.dims},
                        {"rows", row.spec.rows},
                        {"claims_invariance", row.claims_invariance}};
    if (row.spec.tp > 1) j["tp"] = row.spec.tp;
    if (!row.error.empty()) {
      j["error"] = row.error;
      table.push_back(j);
      md << "| " << row.spec.op << " | " << row.spec.dtype_name << " | "
         << dims_string(row.spec.dims) << " | " << row.spec.rows << " | " << row.spec.tp << " | "
         << impl_label << " | error: " << row.error << " | | | | |\n";
      continue;
    }
    const BenchMeasurement& m = *row.measurement;
    double tflops = m.flops > 0 ? m.flops / (m.median_ms * 1e9) : 0.0;
    double gbps = m.bytes_moved / (m.median_ms * 1e6);
    j["median_ms"] = m.median_ms;
    j["min_ms"] = m.min_ms;
    j["tflops"] = tflops;
    j["gbps"] = gbps;
    j["config"] = m.config;
    std::string versus;
    const Impl* timed = registry.find_impl(row.spec.op, row.impl);
    const std::string baseline = timed && !timed->info().bench_baseline.empty()
                                     ? timed->info().bench_baseline
                                     : op->bench_baseline;
    if (!baseline.empty()) {
      for (const auto& other : rows) {
        if (other.impl == baseline && other.measurement && other.spec.op == row.spec.op &&
            other.spec.dtype_name == row.spec.dtype_name && other.spec.dims == row.spec.dims &&
            other.spec.rows == row.spec.rows && other.spec.pass == row.spec.pass &&
            other.spec.tp == row.spec.tp) {
          double ratio = other.measurement->median_ms / m.median_ms;
          j["ratio_to_baseline"] = ratio;
          j["baseline"] = baseline;
          versus = printf_number("%.3fx", ratio);
        }
      }
      describe_copy_fraction(row, gbps, j, versus);
    } else if (!op->bench_external_baseline.empty()) {
      j["external_baseline"] = op->bench_external_baseline;
      versus = "see " + op->bench_external_baseline;
    } else {
      if (copy_gbps > 0) j["fraction_of_copy_bandwidth"] = gbps / copy_gbps;
      describe_copy_fraction(row, gbps, j, versus);
      if (copy_gbps > 0)
        versus += (versus.empty() ? "" : "; ") +
                  printf_number("%.0f%% of 1 GiB copy", 100.0 * gbps / copy_gbps);
    }
    table.push_back(j);
    std::string config = m.config.contains("describe") ? m.config["describe"].get<std::string>()
                         : m.config.contains("path")   ? m.config["path"].get<std::string>()
                                                       : "";
    md << "| " << row.spec.op << " | " << row.spec.dtype_name << " | " << dims_string(row.spec.dims)
       << " | " << row.spec.rows << " | " << row.spec.tp << " | " << impl_label << " | "
       << printf_number("%.4f", m.median_ms) << " | "
       << (tflops > 0 ? printf_number("%.1f", tflops) : "") << " | " << printf_number("%.0f", gbps)
       << " | " << versus << " | " << config << " |\n";
  }

  nlohmann::json report = {{"schema_version", 1}, {"tool", "bitcheck bench"}};
  report["meta"] = environment_meta(registry);
  report["meta"]["argv"] = options.argv;
  report["meta"]["started_at"] = utc_timestamp();
  report["meta"]["copy_bandwidth_gbps"] = copy_gbps;
  report["meta"]["method"] =
      "CUDA events around each launch after " + std::to_string(options.warmup) +
      " warm-up launches; median of " + std::to_string(options.repeats) +
      " launches, inputs rotated over sets larger than L2; " + std::to_string(options.rounds) +
      " interleaved rounds per point, fastest median kept; " +
      "memory-bound ops (and an impl's memory-bound points) against a device-to-device copy of the "
      "same bytes timed the same way";
  report["results"] = table;
  report["cost_of_invariance"] = cost_of_invariance(table);
  const std::string cost_markdown =
      render_cost_of_invariance_markdown(report["cost_of_invariance"]);
  std::filesystem::create_directories(options.out_dir);
  write_file_atomically((std::filesystem::path(options.out_dir) / "bench.json").string(),
                        report.dump(1) + "\n");
  std::ostringstream header;
  header << "# bitcheck bench\n\n- device: " << report["meta"]["cuda"].value("gpu_name", "?")
         << " (" << report["meta"]["cuda"].value("sm_count", 0) << " SMs), cuBLASLt "
         << report["meta"]["cuda"].value("cublaslt_version", 0)
         << "\n- copy bandwidth measured in this run: " << printf_number("%.0f", copy_gbps)
         << " GB/s (1 GiB device-to-device copy, read + write)\n- method: "
         << report["meta"]["method"].get<std::string>()
         << "\n- ratios: baseline median time / impl median time (above 1 = faster than the "
            "library default)\n\n";
  write_file_atomically((std::filesystem::path(options.out_dir) / "bench.md").string(),
                        header.str() + md.str() + "\n" + cost_markdown);
  options.printer->result(md.str() + "\n" + cost_markdown);
  return failures ? exit_internal : exit_pass;
}

}  // namespace bitcheck
