// `bitcheck pins show|diff`: the CLI glue of the tuner's pin-table summaries (pin_summary.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace bitcheck::cli {

struct PinsCommand {
  CLI::App* command = nullptr;
  CLI::App* show = nullptr;
  CLI::App* diff = nullptr;
  std::string show_path = "contract/pins";
  std::string key;
  std::string before, after;
};

// Adds `pins` with its `show` and `diff` subcommands to `app`; the options land in `pins`.
void add_pins_command(CLI::App& app, PinsCommand& pins);
// Runs the parsed subcommand: 0 with its summary on stdout. BadInput for a bad table.
int run_pins_command(const PinsCommand& pins);

}  // namespace bitcheck::cli
