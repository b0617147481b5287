// The bitcheck command line: the CLI11 app, the context every subcommand declares itself into,
// and the mapping of errors to exit codes. Each subcommand lives in its own file (commands.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "external/plugin_loader.h"

namespace bitcheck {
class Registry;
}

namespace bitcheck::cli {

// The process's command line as main received it.
struct CommandLine {
  CommandLine(int count, char** values) : argc(count), argv(values) {}
  // Every argument, the program first: what reports record as the command that produced them.
  std::vector<std::string> arguments() const { return {argv, argv + argc}; }
  // The path this binary was started as, for commands that start it again.
  std::string program() const { return argv[0]; }

  int argc;
  char** argv;
};

// Runs a parsed subcommand against the registry and returns the process exit code.
using Handler = std::function<int(const Registry& registry)>;
// The impls from outside bitcheck (plugins, Python functions) a subcommand loads into the registry
// before its handler runs, read once the command line is parsed.
using ExternalSource = std::function<ExternalImpls()>;

// Declares --plugin and --py-impl on `command` (sweep, list, bench and the sweep's worker).
void add_external_impl_options(CLI::App& command, ExternalImpls& impls);
// The command line's plugins and Python impls, then the spec's "plugins" and "py_impls" (none
// when `spec_path` is empty: the embedded spec names none).
ExternalImpls with_spec_external_impls(ExternalImpls impls, const std::string& spec_path);

// What a subcommand's declaration needs: the command line, and where to leave its handler.
class Context {
 public:
  explicit Context(const CommandLine& line) : command_line(line) {}

  struct Command {
    const CLI::App* subcommand;
    Handler handler;
    ExternalSource external;  // unset: the subcommand loads nothing from outside
  };

  // The handler runs when `subcommand` is the one given on the command line, after the impls
  // `external` names (when set) are loaded into the registry.
  void on(const CLI::App* subcommand, Handler handler, ExternalSource external = nullptr) {
    commands_.push_back({subcommand, std::move(handler), std::move(external)});
  }
  // The subcommand that was parsed; null when none was.
  const Command* parsed() const;

  const CommandLine command_line;

 private:
  std::vector<Command> commands_;
};

// The whole command line: every subcommand declared, ready to parse and run.
class Cli {
 public:
  explicit Cli(const CommandLine& command_line);
  // Parses, builds the registry and runs the chosen subcommand. Returns the process exit code:
  // 0 pass, 1 findings, 2 bad usage or input, 3 internal/device error.
  int run();

 private:
  CLI::App app_;
  Context context_;
};

}  // namespace bitcheck::cli
