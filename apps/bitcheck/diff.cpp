// `bitcheck diff`: compare two reports; exit 1 when the later one regressed.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "report/report.h"
#include "report/report_diff.h"

namespace bitcheck::cli {
namespace {

struct DiffFlags {
  std::string old_report, new_report, json;
};

int run(const DiffFlags& flags) {
  nlohmann::json reports[2];
  const std::string paths[2] = {flags.old_report, flags.new_report};
  for (int i = 0; i < 2; ++i) {
    reports[i] = load_json_file(paths[i]);
    JsonCursor root(reports[i], paths[i]);
    for (const auto& c : root.at("results").items()) {
      for (const char* field : {"id", "verdict"}) c.at(field).as_string();
    }
    root.at("meta").expect_object();
  }
  ReportDiff diff = diff_reports(reports[0], reports[1]);
  if (!flags.json.empty()) write_file_atomically(flags.json, diff.document.dump(1) + "\n");
  std::cout << render_diff(diff);
  return diff.regression ? exit_findings : exit_pass;
}

}  // namespace

void add_diff_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<DiffFlags>();
  auto* command = app.add_subcommand(
      "diff",
      "Compare two reports: regressions, fixes, verdict and fingerprint changes (exit 1 on "
      "regression)");
  command->add_option("old", flags->old_report, "Earlier report")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("new", flags->new_report, "Later report")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--json", flags->json, "Also write the diff as JSON to this file");
  context.on(command, [flags](const Registry&) { return run(*flags); });
}

}  // namespace bitcheck::cli
