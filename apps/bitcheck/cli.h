// The bitcheck command line (CLI11 subcommands): parsing and dispatch only.
#pragma once

namespace bitcheck::cli {
// Returns the process exit code: 0 pass, 1 findings, 2 bad usage or input, 3 internal/device error.
int run(int argc, char** argv);
}  // namespace bitcheck::cli
