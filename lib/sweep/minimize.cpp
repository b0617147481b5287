// Greedy shrinking of a drifting case: bisection on the layer count, the batch size and each dim,
// then the fewest layouts, repeated until a round changes nothing or the trial budget is spent.
// A candidate is accepted only when it shows the original verdict class again (drift stays drift,
// nondeterministic stays nondeterministic); shapes the op refuses are never run.
#include "sweep/minimize.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/json_input.h"
#include "report/case_json.h"
#include "report/report.h"
#include "run/runner.h"
#include "sweep/repro.h"
#include "sweep/sweep.h"

namespace bitcheck {
namespace {

// The dim holding a stack's depth: shrunk first, since every other trial then runs fewer layers.
const char* const layers_dim = "layers";

std::string finding_text(const CaseResult& result) {
  const auto& findings =
      result.verdict == Verdict::nondeterministic ? result.nondeterminism : result.drift;
  if (findings.empty()) return to_string(result.verdict);
  const DriftMetrics& first = findings.front();
  return to_string(result.verdict) + " (" + first.tensor + ", layout " + first.layout + ", " +
         std::to_string(first.mismatch_count) + " mismatches, max ULP " +
         std::to_string(first.max_ulp_distance) + ")";
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ",") + name;
  return text;
}

class Minimizer {
 public:
  Minimizer(Runner& runner, Printer& printer, const OpDef& op, CaseSpec start,
            CaseResult start_result, int max_trials)
      : runner_(runner),
        printer_(printer),
        op_(op),
        target_(start_result.verdict),
        max_trials_(max_trials),
        best_(std::move(start)),
        best_result_(std::move(start_result)) {}

  void run() {
    for (bool changed = true; changed && budget_left();) {
      changed = false;
      if (best_.dims.count(layers_dim)) changed |= shrink_dim(layers_dim);
      changed |= shrink_value("M", [](CaseSpec& c) -> std::int64_t& { return c.rows; });
      std::vector<std::string> dims;
      for (const auto& entry : best_.dims) dims.push_back(entry.first);
      for (const auto& name : dims) {
        if (name != layers_dim) changed |= shrink_dim(name);
      }
      changed |= shrink_layouts();
    }
  }

  const CaseSpec& best() const { return best_; }
  const CaseResult& best_result() const { return best_result_; }
  int trials() const { return trials_; }
  int steps() const { return steps_; }
  bool budget_left() const { return trials_ < max_trials_; }

 private:
  // Runs a candidate: true (and its result) when it shows the target verdict again.
  bool still_fails(const CaseSpec& candidate, const std::string& label, CaseResult& result) {
    if (op_.shape_problem) {
      if (auto problem = op_.shape_problem(candidate)) {
        printer_.result("  " + label + ": not a valid shape (" + *problem + ")\n");
        return false;
      }
    }
    ++trials_;
    result = runner_.run_case(candidate);
    const bool fails = result.verdict == target_;
    if (!fails) printer_.result("  " + label + ": " + to_string(result.verdict) + ", rejected\n");
    return fails;
  }

  void accept(CaseSpec candidate, CaseResult result, const std::string& change) {
    ++steps_;
    printer_.result("step " + std::to_string(steps_) + ": " + change + ": " + finding_text(result) +
                    "\n");
    best_ = std::move(candidate);
    best_result_ = std::move(result);
  }

  // Bisection for the smallest value in [1, current] that still fails (current is known to):
  // every value tried is either accepted (the new upper end) or raises the lower end.
  bool shrink_value(const std::string& label,
                    const std::function<std::int64_t&(CaseSpec&)>& field) {
    bool changed = false;
    std::int64_t low = 1;
    while (budget_left()) {
      std::int64_t high = field(best_);
      if (low >= high) break;
      std::int64_t middle = low + (high - low) / 2;
      CaseSpec candidate = best_;
      field(candidate) = middle;
      CaseResult result;
      if (still_fails(candidate, label + "=" + std::to_string(middle), result)) {
        accept(std::move(candidate), std::move(result),
               label + " " + std::to_string(high) + " -> " + std::to_string(middle));
        changed = true;
      } else {
        low = middle + 1;
      }
    }
    return changed;
  }

  bool shrink_dim(const std::string& name) {
    return shrink_value(name, [&name](CaseSpec& c) -> std::int64_t& { return c.dims.at(name); });
  }

  // The fewest layouts: first each single layout (those named in the findings first), then, when
  // no single one shows the verdict, dropping layouts one at a time.
  bool shrink_layouts() {
    if (best_.layouts.size() <= 1) return false;
    std::vector<std::string> order;
    for (const auto& finding : best_result_.drift) {
      if (std::count(best_.layouts.begin(), best_.layouts.end(), finding.layout) &&
          !std::count(order.begin(), order.end(), finding.layout)) {
        order.push_back(finding.layout);
      }
    }
    for (const auto& layout : best_.layouts) {
      if (!std::count(order.begin(), order.end(), layout)) order.push_back(layout);
    }
    for (const auto& layout : order) {
      if (!budget_left()) return false;
      CaseSpec candidate = best_;
      candidate.layouts = {layout};
      CaseResult result;
      if (still_fails(candidate, "layouts=" + layout, result)) {
        accept(std::move(candidate), std::move(result),
               "layouts " + join(best_.layouts) + " -> " + layout);
        return true;
      }
    }
    bool changed = false;
    for (std::size_t i = 0;
         i < best_.layouts.size() && best_.layouts.size() > 1 && budget_left();) {
      CaseSpec candidate = best_;
      candidate.layouts.erase(candidate.layouts.begin() + static_cast<std::ptrdiff_t>(i));
      CaseResult result;
      if (still_fails(candidate, "layouts=" + join(candidate.layouts), result)) {
        accept(std::move(candidate), std::move(result),
               "layouts " + join(best_.layouts) + " -> " + join(candidate.layouts));
        changed = true;
      } else {
        ++i;
      }
    }
    return changed;
  }

  Runner& runner_;
  Printer& printer_;
  const OpDef& op_;
  Verdict target_;
  int max_trials_;
  int trials_ = 0;
  int steps_ = 0;
  CaseSpec best_;
  CaseResult best_result_;
};

std::string size_change(const CaseSpec& from, const CaseSpec& to) {
  std::string text = "M " + std::to_string(from.rows) + " -> " + std::to_string(to.rows);
  for (const auto& [name, extent] : from.dims) {
    text += ", " + name + " " + std::to_string(extent) + " -> " + std::to_string(to.dims.at(name));
  }
  return text + ", layouts " + std::to_string(from.layouts.size()) + " -> " +
         std::to_string(to.layouts.size());
}

}  // namespace

int run_minimize(const MinimizeOptions& options, const Registry& registry) {
  if (options.max_trials < 1)
    throw BadInput("command line", "--max-trials", "a positive trial count");
  auto start = std::chrono::steady_clock::now();
  nlohmann::json report = load_json_file(options.report_path);
  ReportCase found =
      find_report_case(JsonCursor(report, options.report_path), options.case_id, registry);
  const std::string recorded = found.entry.at("verdict").as_string();
  if (recorded != to_string(Verdict::drift) && recorded != to_string(Verdict::nondeterministic)) {
    found.entry.at("verdict").fail(
        "drift or nondeterministic (minimize shrinks a case that drifts), got \"" + recorded +
        "\"");
  }
  CaseSpec spec = found.spec;
  const OpDef* op = registry.find_op(spec.op);

  start_run(registry, options.run);
  Contract contract = load_contract_or_embedded(options.contract_path, registry);
  Runner runner(registry, contract);
  Printer& printer = *options.printer;
  printer.result("case: " + spec.id() + " (report: " + recorded + ")\n");
  CaseResult original = runner.run_case(spec);
  if (to_string(original.verdict) != recorded) {
    printer.result("re-run: " + to_string(original.verdict) + ", not " + recorded +
                   ": the case does not reproduce its verdict, nothing to minimize\n");
    return exit_findings;
  }
  printer.result("re-run: " + finding_text(original) + "\n");

  Minimizer minimizer(runner, printer, *op, spec, std::move(original), options.max_trials);
  minimizer.run();
  const CaseSpec& best = minimizer.best();

  RunMeta meta;
  meta.argv = options.argv;
  meta.spec_source = options.report_path;
  meta.contract_source = contract.source;
  meta.started_at = utc_timestamp();
  meta.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json minimized =
      build_report(meta, environment_meta(registry), {minimizer.best_result()}, registry);
  minimized["meta"]["minimized_from"] = {{"report", options.report_path},
                                         {"case", options.case_id},
                                         {"trials", minimizer.trials()},
                                         {"steps", minimizer.steps()},
                                         {"budget_exhausted", !minimizer.budget_left()}};
  const std::filesystem::path report_file(options.out_path);
  if (report_file.has_parent_path()) std::filesystem::create_directories(report_file.parent_path());
  write_file_atomically(options.out_path, minimized.dump(1) + "\n");

  std::ostringstream text;
  text << "minimized: " << best.id() << "\n"
       << "  from " << spec.id() << "\n"
       << "  " << size_change(spec, best) << "; " << minimizer.steps() << " steps in "
       << minimizer.trials() << " trials"
       << (minimizer.budget_left() ? "" : " (trial budget exhausted: --max-trials)") << "\n"
       << "  layouts: " << join(best.layouts) << "\n"
       << "report: " << options.out_path << "\n"
       << "replay: " << repro_command(options.binary, options.out_path, best.id(), options.run)
       << "\n";
  printer.result(text.str());
  return exit_pass;
}

}  // namespace bitcheck
