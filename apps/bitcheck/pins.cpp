// `bitcheck pins show [DIR|FILE] [--key K]` and `bitcheck pins diff OLD NEW`: summaries of a pin
// table or of a change to one, in a few lines per key (the logic is the tuner's pin_summary.h).
#include "pins.h"

#include <iostream>

#include "tuner/pin_summary.h"

namespace bitcheck::cli {

void add_pins_command(CLI::App& app, PinsCommand& pins) {
  pins.command = app.add_subcommand(
      "pins", "Summarize cuBLASLt pin tables: key, class fingerprint, buckets, configurations");
  pins.command->require_subcommand(1);
  pins.show = pins.command->add_subcommand(
      "show", "One line per key of a pin table (a directory of pin files or one file)");
  pins.show->add_option("table", pins.show_path, "Pin directory or file (default: contract/pins)");
  pins.show->add_option(
      "--key", pins.key,
      "Only this key, as its file is named (e.g. sm90-lt13.1-bf16-forward-N4096-K4096)");
  pins.diff = pins.command->add_subcommand(
      "diff", "Keys added, removed and changed between two pin tables (directories or files)");
  pins.diff->add_option("old", pins.before, "The table before (a directory or a file)")->required();
  pins.diff->add_option("new", pins.after, "The table after (a directory or a file)")->required();
}

int run_pins_command(const PinsCommand& pins) {
  if (*pins.show) {
    std::cout << pins_show_text(pins.show_path, summarize_pins(pins.show_path), pins.key);
    return 0;
  }
  std::cout << pins_diff_text(pins.before, summarize_pins(pins.before), pins.after,
                              summarize_pins(pins.after));
  return 0;
}

}  // namespace bitcheck::cli
