// `bitcheck pins show [DIR|FILE] [--key K]` and `bitcheck pins diff OLD NEW`: summaries of a pin
// table or of a change to one, in a few lines per key (the logic is the tuner's pin_summary.h).
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "tuner/pin_summary.h"

namespace bitcheck::cli {
namespace {

struct PinsFlags {
  CLI::App* show = nullptr;
  std::string show_path = "contract/pins";
  std::string key;
  std::string before, after;
};

int run(const PinsFlags& flags) {
  if (*flags.show) {
    std::cout << pins_show_text(flags.show_path, summarize_pins(flags.show_path), flags.key);
    return 0;
  }
  std::cout << pins_diff_text(flags.before, summarize_pins(flags.before), flags.after,
                              summarize_pins(flags.after));
  return 0;
}

}  // namespace

void add_pins_command(CLI::App& app, Context& context) {
  auto flags = std::make_shared<PinsFlags>();
  auto* command = app.add_subcommand(
      "pins", "Summarize cuBLASLt pin tables: key, class fingerprint, buckets, configurations");
  command->require_subcommand(1);
  flags->show = command->add_subcommand(
      "show", "One line per key of a pin table (a directory of pin files or one file)");
  flags->show->add_option("table", flags->show_path,
                          "Pin directory or file (default: contract/pins)");
  flags->show->add_option(
      "--key", flags->key,
      "Only this key, as its file is named (e.g. sm90-lt13.1-bf16-forward-N4096-K4096)");
  auto* diff = command->add_subcommand(
      "diff", "Keys added, removed and changed between two pin tables (directories or files)");
  diff->add_option("old", flags->before, "The table before (a directory or a file)")->required();
  diff->add_option("new", flags->after, "The table after (a directory or a file)")->required();
  context.on(command, [flags](const Registry&) { return run(*flags); });
}

}  // namespace bitcheck::cli
