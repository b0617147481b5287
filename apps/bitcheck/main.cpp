// bitcheck: proves GPU kernels batch-invariant. main keeps freed host memory for reuse
// (core/host_memory.h), takes the command line, builds the CLI with every subcommand, and runs
// the one given.
#include "cli.h"
#include "core/host_memory.h"

int main(int argc, char** argv) {
  bitcheck::keep_host_memory();
  const bitcheck::cli::CommandLine command_line(argc, argv);
  bitcheck::cli::Cli cli(command_line);
  return cli.run();
}
