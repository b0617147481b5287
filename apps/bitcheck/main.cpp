// bitcheck: proves GPU kernels batch-invariant. main takes the command line, builds the CLI with
// every subcommand, and runs the one given.
#include "cli.h"

int main(int argc, char** argv) {
  const bitcheck::cli::CommandLine command_line(argc, argv);
  bitcheck::cli::Cli cli(command_line);
  return cli.run();
}
