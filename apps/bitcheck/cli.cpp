// Command-line parsing and dispatch. Every subcommand's work lives in lib/; this file maps flags
// to options and exceptions to exit codes.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "bitcheck/algos.h"
#include "bitcheck/algos_refine.h"
#include "bitcheck/bench.h"
#include "bitcheck/build_info.h"
#include "bitcheck/contract.h"
#include "bitcheck/error.h"
#include "bitcheck/isolation.h"
#include "bitcheck/json_input.h"
#include "bitcheck/matrix_render.h"
#include "bitcheck/report.h"
#include "bitcheck/report_diff.h"
#include "bitcheck/repro.h"
#include "bitcheck/layout.h"
#include "bitcheck/minimize.h"
#include "bitcheck/op.h"
#include "bitcheck/plugin_loader.h"
#include "bitcheck/special_values.h"
#include "bitcheck/sweep.h"

namespace bitcheck::cli {
namespace {

void print_list(const Registry& registry, const Contract& contract, bool as_json) {
  nlohmann::json j;
  for (const OpDef* op : registry.ops()) {
    nlohmann::json op_json = {{"name", op->name}, {"summary", op->summary}, {"dims", op->dim_names},
                              {"has_backward", op->has_backward}, {"impls", nlohmann::json::array()}};
    for (Impl* impl : registry.impls(op->name)) {
      op_json["impls"].push_back({{"name", impl->name()},
                                  {"backend", impl->backend()},
                                  {"claims_invariance", impl->claims_invariance()},
                                  {"description", impl->description()}});
    }
    j["ops"].push_back(op_json);
  }
  for (const auto& [dtype, status] : contract.dtypes) j["dtypes"][dtype] = to_string(status);
  for (const auto& backend : registry.backends()) {
    j["backends"][backend] = {{"available", registry.backend_available(backend)},
                              {"reason", registry.backend_reason(backend)}};
  }
  j["layouts"] = known_layouts();
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "ops and impls (* = control, expected to drift):\n";
  for (const auto& op : j["ops"]) {
    std::cout << "  " << op["name"].get<std::string>() << "  " << op["summary"].get<std::string>() << "\n";
    for (const auto& impl : op["impls"]) {
      std::cout << "    " << (impl["claims_invariance"].get<bool>() ? " " : "*") << " "
                << op["name"].get<std::string>() << "/" << impl["name"].get<std::string>() << " ["
                << impl["backend"].get<std::string>() << "] " << impl["description"].get<std::string>() << "\n";
    }
  }
  std::cout << "dtypes:";
  for (const auto& [dtype, status] : j["dtypes"].items()) std::cout << " " << dtype << " (" << status.get<std::string>() << ")";
  std::cout << "\nbackends:";
  for (const auto& [name, backend] : j["backends"].items()) {
    std::cout << " " << name << (backend["available"].get<bool>() ? " (available)" : " (unavailable: " + backend["reason"].get<std::string>() + ")");
  }
  std::cout << "\nlayouts:";
  for (const auto& layout : j["layouts"]) std::cout << " " << layout.get<std::string>();
  std::cout << "\n";
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bitcheck: proves GPU kernels batch-invariant, bit for bit, forward and backward"};
  app.set_version_flag("--version", std::string("bitcheck ") + version_string() + " (" + git_revision() + ")");
  app.require_subcommand(1);

  SweepOptions sweep;
  for (int i = 0; i < argc; ++i) sweep.argv.emplace_back(argv[i]);
  std::vector<std::string> seeds;
  int repeats = 0;
  bool no_progress = false;
  auto* sweep_cmd = app.add_subcommand("sweep", "Run a sweep (the embedded default spec unless --spec is given) and write a report");
  sweep_cmd->add_option("--spec", sweep.spec_path, "Sweep spec JSON (default: embedded sweeps/default.json)");
  sweep_cmd->add_option("--contract", sweep.contract_path, "Contract JSON (default: embedded contract/contract.json)");
  sweep_cmd->add_option("--op", sweep.overrides.ops, "Ops to run: all, or names (comma-separated)")->delimiter(',');
  sweep_cmd->add_option("--impl", sweep.overrides.impls, "Only these impls (comma-separated)")->delimiter(',');
  sweep_cmd->add_option("--dtype", sweep.overrides.dtypes, "Override the dtypes (comma-separated)")->delimiter(',');
  sweep_cmd->add_option("--pass", sweep.overrides.passes, "forward and/or backward")->delimiter(',');
  sweep_cmd->add_option("--layout", sweep.overrides.layouts, "Override the layouts (comma-separated)")->delimiter(',');
  sweep_cmd->add_option("--batch", sweep.overrides.batches, "Override the batch sizes M (comma-separated)")->delimiter(',');
  sweep_cmd->add_option("--seed", seeds, "Override the seeds (comma-separated)")->delimiter(',');
  auto* repeats_option = sweep_cmd->add_option("--repeats", repeats, "Canonical runs for the determinism check (>= 2)");
  sweep_cmd->add_option("--backend", sweep.overrides.backend, "auto (every available backend), cpu or cuda");
  sweep_cmd->add_option("--out", sweep.out_dir, "Directory for the report (default: out)");
  sweep_cmd->add_flag("--no-progress", no_progress, "No progress line");
  std::string shard;
  sweep_cmd->add_option("--shard", shard, "Run shard i of n (i/n, 0-based): the cases whose index is i modulo n");
  std::vector<std::string> skip_done;
  sweep_cmd->add_option("--skip-done", skip_done,
                        "Reports (e.g. interrupted ones) whose checked cases are not run again; merge them with this run's report afterwards")
      ->check(CLI::ExistingFile);
  sweep_cmd->add_option("--report-name", sweep.report_name, "File name of the report in --out (default report.json)");
  sweep_cmd->add_flag("--yes", sweep.confirmed, "Run even when the spec expands to more than --max-cases cases");
  sweep_cmd->add_option("--max-cases", sweep.max_cases, "Case count above which --yes is required (default 20000)");
  bool isolate = false, no_isolate = false;
  auto* isolate_flag = sweep_cmd->add_flag(
      "--isolate", isolate, "Run the cases in a worker process, so a crash or a sticky CUDA error costs only its own case (default when CUDA cases can run)");
  auto* no_isolate_flag = sweep_cmd->add_flag("--no-isolate", no_isolate, "Run every case in this process")->excludes(isolate_flag);
  sweep_cmd
      ->add_option("--case-timeout", sweep.case_timeout_seconds,
                   "Seconds a case may run before it is `error` and its worker process is killed (a hung kernel); implies --isolate")
      ->excludes(no_isolate_flag);
  ExternalImpls external;  // --plugin / --py-impl (sweep, list, bench and the sweep's worker)
  auto add_external_options = [&external](CLI::App* command) {
    command->add_option("--plugin", external.plugins, "Load impls from this C ABI plugin (include/bitcheck/plugin.h)");
    command->add_option("--py-impl", external.py_impls, "Run this Python function as an impl (module:function, see python/bitcheck_py)");
  };
  add_external_options(sweep_cmd);
  sweep.worker_executable = "/proc/self/exe";  // this binary, even if its file was replaced meanwhile
  bool special_values = false;
  double special_values_rate = 0;
  sweep_cmd->add_flag("--special-values", special_values,
                      "Mix NaN, +-Inf, subnormals and -0 into float row inputs (1 element in 32)");
  auto* special_rate_option = sweep_cmd->add_option(
      "--special-values-rate", special_values_rate,
      "Special values at this rate in [0, 0.5] (0 turns off what the spec enables)");
  sweep_cmd->add_option("--devices", sweep.devices,
                        "Run one shard per listed device in parallel (child processes with CUDA_VISIBLE_DEVICES set), merged into one report; on the CPU backend only the parallelism")
      ->delimiter(',');

  std::string matrix_report, matrix_format = "md", matrix_output;
  auto* matrix_cmd = app.add_subcommand("matrix", "Render a report's status matrix as markdown, HTML or JUnit XML");
  matrix_cmd->add_option("report", matrix_report, "Report JSON")->required()->check(CLI::ExistingFile);
  matrix_cmd->add_option("--format", matrix_format, "md, html or junit")->check(CLI::IsMember({"md", "html", "junit"}));
  matrix_cmd->add_option("--out", matrix_output, "Output file (default: standard output)");

  ReproOptions repro;
  repro.binary = argv[0];
  auto* repro_cmd = app.add_subcommand("repro", "Re-run one case of a report exactly; --dump writes its tensors as .npy");
  repro_cmd->add_option("report", repro.report_path, "Report JSON")->required()->check(CLI::ExistingFile);
  repro_cmd->add_option("--case", repro.case_id, "Case id (the report's results[].id)")->required();
  repro_cmd->add_option("--dump", repro.dump_dir, "Write inputs, every layout's outputs and the reference as .npy + index.json");
  repro_cmd->add_option("--contract", repro.contract_path, "Contract JSON (default: embedded)");

  MinimizeOptions minimize;
  minimize.binary = argv[0];
  for (int i = 0; i < argc; ++i) minimize.argv.emplace_back(argv[i]);
  auto* minimize_cmd = app.add_subcommand("minimize", "Shrink a drifting case of a report (layers, rows, dims, layouts) while it still drifts; prints the replay command");
  minimize_cmd->add_option("report", minimize.report_path, "Report JSON")->required()->check(CLI::ExistingFile);
  minimize_cmd->add_option("--case", minimize.case_id, "Case id of a drift or nondeterministic result")->required();
  minimize_cmd->add_option("--out", minimize.out_path, "One-case report of the smallest case found (default out/minimized.json)");
  minimize_cmd->add_option("--max-trials", minimize.max_trials, "Most candidate cases to run (default 200)");
  minimize_cmd->add_option("--contract", minimize.contract_path, "Contract JSON (default: embedded)");

  std::string diff_old, diff_new, diff_json;
  auto* diff_cmd = app.add_subcommand("diff", "Compare two reports: regressions, fixes, verdict and fingerprint changes (exit 1 on regression)");
  diff_cmd->add_option("old", diff_old, "Earlier report")->required()->check(CLI::ExistingFile);
  diff_cmd->add_option("new", diff_new, "Later report")->required()->check(CLI::ExistingFile);
  diff_cmd->add_option("--json", diff_json, "Also write the diff as JSON to this file");

  std::vector<std::string> merge_inputs;
  std::string merge_output;
  auto* merge_cmd = app.add_subcommand("merge", "Combine shard reports into one report");
  merge_cmd->add_option("--out", merge_output, "Merged report file")->required();
  merge_cmd->add_option("reports", merge_inputs, "Shard reports")->required()->check(CLI::ExistingFile);
  sweep_cmd->add_option("--pins", sweep.cuda.pin_file, "cuBLASLt pin table (default: contract/cublaslt-pins.json)");
  sweep_cmd->add_flag("--write-pins", sweep.cuda.write_pins, "Write pins derived in this run back to the pin table");

  BenchOptions bench;
  for (int i = 0; i < argc; ++i) bench.argv.emplace_back(argv[i]);
  auto* bench_cmd = app.add_subcommand("bench", "Time device impls against the library default (or copy bandwidth) in one run");
  bench_cmd->add_option("--spec", bench.spec_path, "Sweep spec whose shapes and batches to time (default: embedded)");
  bench_cmd->add_option("--op", bench.overrides.ops, "Ops (comma-separated, or all)")->delimiter(',');
  bench_cmd->add_option("--impl", bench.overrides.impls, "Only these impls (comma-separated)")->delimiter(',');
  bench_cmd->add_option("--dtype", bench.overrides.dtypes, "dtypes (comma-separated)")->delimiter(',');
  bench_cmd->add_option("--pass", bench.overrides.passes, "forward (default) and/or backward")->delimiter(',');
  bench_cmd->add_option("--batch", bench.overrides.batches, "Batch sizes M (comma-separated)")->delimiter(',');
  bench_cmd->add_option("--repeats", bench.repeats, "Timed launches per measurement (median)");
  bench_cmd->add_option("--rounds", bench.rounds, "Interleaved rounds per point (fastest median kept)");
  bench_cmd->add_option("--out", bench.out_dir, "Directory for bench.json and bench.md");
  std::string bench_pins = "contract/cublaslt-pins.json";
  bench_cmd->add_option("--pins", bench_pins, "cuBLASLt pin table");

  AlgosOptions algos;
  for (int i = 0; i < argc; ++i) algos.argv.emplace_back(argv[i]);
  auto* algos_cmd = app.add_subcommand(
      "algos", "Search cuBLASLt configurations of one GEMM shape: bit-classes, fastest per M bucket, pin table");
  algos_cmd->add_option("--n", algos.request.n, "N (output columns of the forward GEMM)")->required();
  algos_cmd->add_option("--k", algos.request.k, "K (the summed dimension)")->required();
  algos_cmd->add_option("--dtype", algos.request.dtype, "bf16 (default), fp16 or fp32");
  algos_cmd->add_option("--form", algos.request.form, "forward (default, Y = X W^T) or input_grad (dX = dY W)");
  algos_cmd->add_option("--rows", algos.request.rows,
                        "Bucket edges: M values to test, each the upper edge of its bucket (comma-separated)")
      ->delimiter(',');
  bool algos_no_interior = false;
  algos_cmd->add_flag("--no-interior", algos_no_interior,
                      "Time only the edges, not also one M inside each bucket");
  algos_cmd->add_option("--seed", algos.request.seed, "Seed of the random X and W");
  algos_cmd->add_option("--max-candidates", algos.request.max_candidates, "Most configurations to run (default 160)");
  algos_cmd->add_option("--budget-seconds", algos.request.budget_seconds,
                        "Stop starting new candidates after this long (default 40)");
  algos_cmd->add_option("--repeats", algos.request.repeats, "Timed launches per full measurement (median)");
  algos_cmd->add_option("--warmup", algos.request.warmup, "Warm-up launches before timing");
  algos_cmd->add_option("--out", algos.out_dir, "Directory for algos-<dtype>-<form>-N<n>-K<k>.json and .md");
  algos_cmd->add_option("--write-pins", algos.pin_file, "Merge the best table into this pin file");
  bool algos_no_progress = false;
  algos_cmd->add_flag("--no-progress", algos_no_progress, "No progress line");
  std::string algos_refine;
  algos_cmd->add_option("--refine", algos_refine,
                        "Instead of searching: refine this file's bucketed pin for the shape so it "
                        "follows the heuristic's split-K-1 pick per M where that gives the table's bits "
                        "and is faster; verified row for row before --write-pins merges it");
  std::int64_t algos_scan_rows = 16384, algos_verify_all_rows = 2048;
  algos_cmd->add_option("--scan-rows", algos_scan_rows,
                        "--refine: ask the heuristic at every M up to this (default 16384)");
  algos_cmd->add_option("--verify-all-rows", algos_verify_all_rows,
                        "--refine: verify every M up to this, besides every bucket edge (default 2048)");

  bool list_json = false;
  std::string list_contract;
  auto* list_cmd = app.add_subcommand("list", "List ops, impls, dtypes, backends and layouts");
  list_cmd->add_flag("--json", list_json, "Machine-readable output");
  add_external_options(list_cmd);

  std::string contract_path;
  auto* contract_cmd = app.add_subcommand("contract", "Show or check the numerical contract");
  contract_cmd->require_subcommand(1);
  auto* show_cmd = contract_cmd->add_subcommand("show", "Print the contract as bitcheck reads it");
  auto* check_cmd = contract_cmd->add_subcommand("check", "Validate the contract; exit 2 if it is invalid");
  for (auto* cmd : {show_cmd, check_cmd}) {
    cmd->add_option("--contract", contract_path, "Contract JSON (default: embedded contract/contract.json)");
  }

  // Hidden: the worker process of an isolated sweep (see lib/bitcheck/isolation.h).
  int worker_fd = -1;
  auto* worker_cmd = app.add_subcommand("__sweep-worker", "Run sweep cases sent over a socket")->group("");
  worker_cmd->add_option("--fd", worker_fd, "Socket to the sweep process")->required();
  add_external_options(worker_cmd);
  add_external_options(bench_cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : exit_bad_input;
  }

  try {
    Registry registry;
    register_all(registry);
    if (*sweep_cmd && !sweep.spec_path.empty()) {
      ExternalImpls of_spec = external_impls_of_spec(sweep.spec_path);
      external.plugins.insert(external.plugins.end(), of_spec.plugins.begin(), of_spec.plugins.end());
      external.py_impls.insert(external.py_impls.end(), of_spec.py_impls.begin(), of_spec.py_impls.end());
    }
    if (*repro_cmd) external = external_impls_of_report(repro.report_path);
    if (*minimize_cmd) external = external_impls_of_report(minimize.report_path);
    load_external_impls(registry, external);
    if (*worker_cmd) return run_sweep_worker(registry, worker_fd);
    if (*sweep_cmd) {
      if (!(sweep.case_timeout_seconds >= 0) || sweep.case_timeout_seconds > 7 * 24 * 3600.0) {
        throw BadInput("command line", "--case-timeout", "seconds in [0, 604800] (0: no limit)");
      }
      sweep.isolation = isolate ? SweepOptions::Isolation::on
                        : no_isolate ? SweepOptions::Isolation::off
                                     : SweepOptions::Isolation::automatic;
      for (const auto& seed : seeds) {
        try {
          std::size_t used = 0;
          unsigned long long value = std::stoull(seed, &used);
          if (used != seed.size() || seed[0] == '-') throw std::invalid_argument(seed);
          sweep.overrides.seeds.push_back(value);
        } catch (const std::exception&) {
          throw BadInput("command line", "--seed", "a non-negative integer, got \"" + seed + "\"");
        }
      }
      if (repeats_option->count()) sweep.overrides.repeats = repeats;
      if (special_values) sweep.overrides.special_values = default_special_value_rate;
      if (special_rate_option->count()) sweep.overrides.special_values = special_values_rate;
      if (!shard.empty()) {
        auto slash = shard.find('/');
        try {
          if (slash == std::string::npos) throw std::invalid_argument(shard);
          sweep.overrides.shard_index = std::stoi(shard.substr(0, slash));
          sweep.overrides.shard_count = std::stoi(shard.substr(slash + 1));
        } catch (const std::exception&) {
          throw BadInput("command line", "--shard", "i/n, e.g. 0/4, got \"" + shard + "\"");
        }
      }
      sweep.skip_done_reports = skip_done;
      for (const auto& path : skip_done) {
        nlohmann::json done = load_json_file(path);
        JsonCursor root(done, path);
        JsonCursor results = root.at("results");
        results.expect_array(true);
        for (const auto& c : results.node()) {
          // A case that ended in error (a fault, an interrupted device) is tried again.
          if (c.is_object() && c.value("verdict", "") != "error" && c.contains("id") && c["id"].is_string()) {
            sweep.overrides.skip_ids.insert(c["id"].get<std::string>());
          }
        }
      }
      sweep.progress = !no_progress;
      return run_sweep(sweep, registry);
    }
    if (*matrix_cmd) {
      nlohmann::json report = load_json_file(matrix_report);
      JsonCursor root(report, matrix_report);
      for (const char* field : {"results", "summary", "status_matrix", "meta"}) root.at(field);
      std::string text = matrix_format == "html"    ? render_matrix_html(report)
                         : matrix_format == "junit" ? render_junit(report)
                                                    : render_matrix_markdown(report);
      if (matrix_output.empty()) {
        std::cout << text;
      } else {
        write_file_atomically(matrix_output, text);
      }
      return exit_pass;
    }
    if (*repro_cmd) return run_repro(repro, registry);
    if (*minimize_cmd) return run_minimize(minimize, registry);
    if (*diff_cmd) {
      nlohmann::json reports[2];
      const std::string paths[2] = {diff_old, diff_new};
      for (int i = 0; i < 2; ++i) {
        reports[i] = load_json_file(paths[i]);
        JsonCursor root(reports[i], paths[i]);
        for (const auto& c : root.at("results").items()) {
          for (const char* field : {"id", "verdict"}) c.at(field).as_string();
        }
        root.at("meta").expect_object();
      }
      ReportDiff diff = diff_reports(reports[0], reports[1]);
      if (!diff_json.empty()) write_file_atomically(diff_json, diff.document.dump(1) + "\n");
      std::cout << render_diff(diff);
      return diff.regression ? exit_findings : exit_pass;
    }
    if (*merge_cmd) {
      std::vector<nlohmann::json> reports;
      for (const auto& path : merge_inputs) {
        nlohmann::json report = load_json_file(path);
        JsonCursor root(report, path);
        root.at("results").expect_array(true);
        root.at("meta").expect_object();
        reports.push_back(std::move(report));
      }
      std::vector<std::string> op_order;
      for (const OpDef* op : registry.ops()) op_order.push_back(op->name);
      nlohmann::json merged;
      try {
        merged = merge_reports(reports, merge_inputs, op_order);
      } catch (const std::invalid_argument& error) {
        throw BadInput(merge_inputs.front(), "$.results", std::string("shards of one sweep (") + error.what() + ")");
      }
      write_file_atomically(merge_output, merged.dump(1) + "\n");
      std::cout << render_terminal_summary(merged) << "merged " << merge_inputs.size() << " reports ("
                << merged["results"].size() << " cases) into " << merge_output << "\n";
      return merged["summary"]["exit_code"].get<int>();
    }
    if (*algos_cmd && !algos_refine.empty()) {
      RefineOptions refine;
      refine.request.dtype = algos.request.dtype;
      refine.request.form = algos.request.form;
      refine.request.n = algos.request.n;
      refine.request.k = algos.request.k;
      refine.request.seed = algos.request.seed;
      refine.request.scan_rows = algos_scan_rows;
      refine.request.verify_all_rows = algos_verify_all_rows;
      if (algos_cmd->count("--budget-seconds")) refine.request.budget_seconds = algos.request.budget_seconds;
      refine.request.repeats = algos.request.repeats;
      refine.request.warmup = algos.request.warmup;
      refine.request.progress = !algos_no_progress;
      refine.request.base_pin_file = algos_refine;
      refine.out_dir = algos.out_dir;
      refine.pin_file = algos.pin_file;
      refine.argv = algos.argv;
      return run_algos_refine(refine);
    }
    if (*algos_cmd) {
      algos.request.progress = !algos_no_progress;
      algos.request.interior = !algos_no_interior;
      return run_algos(algos);
    }
    if (*bench_cmd) {
      configure_cuda_backend({bench_pins, false});
      return run_bench(bench, registry);
    }
    if (*list_cmd) {
      print_list(registry, load_embedded_contract(registry), list_json);
      return exit_pass;
    }
    if (*contract_cmd) {
      Contract contract = load_contract_or_embedded(contract_path, registry);
      if (*show_cmd) {
        std::cout << contract.to_json().dump(2) << "\n";
      } else {
        std::size_t rows = 0;
        for (const auto& [key, per_dtype] : contract.thresholds) rows += per_dtype.size();
        std::cout << "contract OK: " << contract.source << " (" << contract.dtypes.size() << " dtypes, "
                  << rows << " threshold rows, TF32 for fp32 GEMM: "
                  << (contract.fp32_gemm_allows_tf32 ? "allowed" : "off") << ")\n";
      }
      return exit_pass;
    }
  } catch (const BadInput& error) {
    std::cerr << "bitcheck: error: " << error.what() << "\n";
    return exit_bad_input;
  } catch (const std::exception& error) {
    std::cerr << "bitcheck: internal error: " << error.what() << "\n";
    return exit_internal;
  }
  return exit_internal;
}

}  // namespace bitcheck::cli
