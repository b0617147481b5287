// `bitcheck merge`: combine the shard reports of one sweep into one report, cases in op order.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "report/report.h"

namespace bitcheck::cli {
namespace {

struct MergeFlags {
  std::vector<std::string> inputs;
  std::string output;
};

int run(const MergeFlags& flags, const Registry& registry) {
  std::vector<nlohmann::json> reports;
  for (const auto& path : flags.inputs) {
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
    merged = merge_reports(reports, flags.inputs, op_order);
  } catch (const std::invalid_argument& error) {
    throw BadInput(flags.inputs.front(), "$.results",
                   std::string("shards of one sweep (") + error.what() + ")");
  }
  write_file_atomically(flags.output, merged.dump(1) + "\n");
  std::cout << render_terminal_summary(merged, registry) << "merged " << flags.inputs.size()
            << " reports (" << merged["results"].size() << " cases) into " << flags.output << "\n";
  return merged["summary"]["exit_code"].get<int>();
}

}  // namespace

void add_merge_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<MergeFlags>();
  auto* command = app.add_subcommand("merge", "Combine shard reports into one report");
  command->add_option("--out", flags->output, "Merged report file")->required();
  command->add_option("reports", flags->inputs, "Shard reports")
      ->required()
      ->check(CLI::ExistingFile);
  context.on(command, [flags](const Registry& registry) { return run(*flags, registry); });
}

}  // namespace bitcheck::cli
