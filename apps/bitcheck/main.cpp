// bitcheck: proves GPU kernels batch-invariant. main parses the command line and dispatches.
#include "cli.h"

int main(int argc, char** argv) { return bitcheck::cli::run(argc, argv); }
