// `bitcheck matrix`: render a report's status matrix as markdown, HTML or JUnit XML.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "report/matrix_render.h"
#include "report/report.h"
#include "report/report_page.h"

namespace bitcheck::cli {
namespace {

struct MatrixFlags {
  std::string report, format = "md", output;
  std::vector<std::string> previous;  // html: earlier reports, the last night's first
  std::string bench;                  // html: a bench.json to plot the cost of invariance from
};

int run(const MatrixFlags& flags) {
  nlohmann::json report = load_json_file(flags.report);
  JsonCursor root(report, flags.report);
  for (const char* field : {"results", "summary", "status_matrix", "meta"}) root.at(field);
  std::string text;
  if (flags.format == "html") {
    text = render_report_page(
        report, load_report_page_options(flags.report, flags.output, flags.previous, flags.bench));
  } else {
    text = flags.format == "junit" ? render_junit(report) : render_matrix_markdown(report);
  }
  if (flags.output.empty()) {
    std::cout << text;
  } else {
    write_file_atomically(flags.output, text);
  }
  return exit_pass;
}

}  // namespace

void add_matrix_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<MatrixFlags>();
  auto* command = app.add_subcommand(
      "matrix", "Render a report's status matrix as markdown, HTML or JUnit XML");
  command->add_option("report", flags->report, "Report JSON")->required()->check(CLI::ExistingFile);
  command->add_option("--format", flags->format, "md, html or junit")
      ->check(CLI::IsMember({"md", "html", "junit"}));
  command->add_option("--out", flags->output, "Output file (default: standard output)");
  command
      ->add_option("--previous", flags->previous,
                   "html: earlier reports, the last night's first (what changed, history)")
      ->check(CLI::ExistingFile);
  command
      ->add_option("--bench", flags->bench,
                   "html: a bench.json to plot the cost of invariance from")
      ->check(CLI::ExistingFile);
  context.on(command, [flags](const Registry&) { return run(*flags); });
}

}  // namespace bitcheck::cli
