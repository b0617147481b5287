// `bitcheck diff`: compare two reports; exit 1 when the later one regressed.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "report/report.h"
#include "report/report_diff.h"

namespace bitcheck::cli {
namespace {

struct DiffFlags {
  std::string old_report, new_report, json;
};

// A compact report (scripts/compact-report.py: per case [id, verdict, fingerprint, note]) as the
// results diff reads; whether a case is a control (or a library default) comes from this build's
// impl of its id.
void expand_compact(nlohmann::json& report, const std::string& path, const Registry& registry) {
  const JsonCursor root(report, path);
  const std::vector<std::string> fields = root.at("case_fields").as_string_list();
  if (fields.size() < 3 || fields[0] != "id" || fields[1] != "verdict" ||
      fields[2] != "fingerprint")
    root.at("case_fields").fail("[\"id\", \"verdict\", \"fingerprint\", ...] (compact-report.py)");
  nlohmann::json results = nlohmann::json::array();
  for (const JsonCursor& c : root.at("cases").items()) {
    const std::vector<JsonCursor> values = c.items();
    if (values.size() < 3) c.fail("[id, verdict, fingerprint, note]");
    const std::string id = values[0].as_string();
    nlohmann::json entry = {{"id", id}, {"verdict", values[1].as_string()}};
    if (values[2].node().is_string()) entry["fingerprint"] = values[2].node();
    const auto op_end = id.find('/');
    const auto impl_end = id.find('/', op_end == std::string::npos ? op_end : op_end + 1);
    const Impl* impl = impl_end == std::string::npos
                           ? nullptr
                           : registry.find_impl(id.substr(0, op_end),
                                                id.substr(op_end + 1, impl_end - op_end - 1));
    entry["control"] = impl && !impl->claims_invariance();  // as the full report says
    results.push_back(std::move(entry));
  }
  report["results"] = std::move(results);
}

int run(const DiffFlags& flags, const Registry& registry) {
  nlohmann::json reports[2];
  const std::string paths[2] = {flags.old_report, flags.new_report};
  for (int i = 0; i < 2; ++i) {
    reports[i] = load_json_file(paths[i]);
    if (reports[i].contains("compact_of")) expand_compact(reports[i], paths[i], registry);
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
      "Compare two reports (full, or compact as reports/ keeps them): regressions, fixes, verdict "
      "and fingerprint changes (exit 1 on regression)");
  command->add_option("old", flags->old_report, "Earlier report")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("new", flags->new_report, "Later report")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--json", flags->json, "Also write the diff as JSON to this file");
  context.on(command, [flags](const Registry& registry) { return run(*flags, registry); });
}

}  // namespace bitcheck::cli
