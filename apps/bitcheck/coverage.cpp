// `bitcheck coverage`: which declared launch paths a report's cases ran, which switch points they
// crossed with the bits intact, and the paths never run or never crossed.
#include "report/coverage.h"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"

namespace bitcheck::cli {
namespace {

struct CoverageFlags {
  std::string report;
  bool json = false;
  bool all = false;
  bool require = false;
};

int run(const CoverageFlags& flags) {
  nlohmann::json report = load_json_file(flags.report);
  JsonCursor root(report, flags.report);
  root.at("results").expect_array(true);
  if (!report.contains("paths_declared"))
    root.at("paths_declared");  // names the field: a report written before paths were recorded
  root.at("paths_declared").expect_object();
  const Coverage coverage = compute_coverage(report);
  if (flags.json) {
    std::cout << coverage_to_json(coverage).dump(1) << "\n";
  } else {
    std::cout << render_coverage(coverage, !flags.all);
  }
  return flags.require && !coverage_gaps(coverage).empty() ? exit_findings : exit_pass;
}

}  // namespace

void add_coverage_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<CoverageFlags>();
  auto* command = app.add_subcommand(
      "coverage", "Launch paths a report ran per impl, the switch points it crossed, the gaps");
  command->add_option("report", flags->report, "Report JSON")->required()->check(CLI::ExistingFile);
  command->add_flag("--json", flags->json, "The table as JSON");
  command->add_flag("--all", flags->all, "Controls and library defaults too");
  command->add_flag("--require", flags->require,
                    "Exit 1 when a declared path of an invariant impl never ran");
  context.on(command, [flags](const Registry&) { return run(*flags); });
}

}  // namespace bitcheck::cli
