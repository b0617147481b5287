// README.md's commands run as written: every command line of its ```sh blocks is either a bitcheck
// command, run here in order from a directory laid out like the repository (each must exit 0),
// or a script that .ci/run runs.
#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"

namespace {

const std::string bitcheck_prefix = "build/apps/bitcheck ";

// A line without its trailing `# comment` (the commands quote no '#').
std::string without_comment(const std::string& line) {
  const std::size_t hash = line.find(" #");
  std::string kept = hash == std::string::npos ? line : line.substr(0, hash);
  while (!kept.empty() && kept.back() == ' ') kept.pop_back();
  return kept;
}

// The command lines of a markdown text's ```sh blocks: blank lines and comments dropped, a line
// ending in a backslash joined with the next.
std::vector<std::string> shell_commands(const std::string& markdown) {
  std::vector<std::string> commands;
  std::istringstream lines(markdown);
  std::string line, pending;
  bool in_shell_block = false;
  while (std::getline(lines, line)) {
    if (line.rfind("```", 0) == 0) {
      in_shell_block = !in_shell_block && line == "```sh";
      continue;
    }
    if (!in_shell_block) continue;
    std::string command = without_comment(line);
    if (!command.empty() && command.back() == '\\') {
      command.pop_back();
      pending += command;
      continue;
    }
    command = pending + command;
    pending.clear();
    if (command.find_first_not_of(' ') != std::string::npos) commands.push_back(command);
  }
  return commands;
}

// Whether .ci/run runs the script a command starts with.
bool ci_runs(const std::string& ci_script, const std::string& command) {
  const std::string script = command.substr(0, command.find(' '));
  return script.rfind("scripts/", 0) == 0 && ci_script.find("\n" + script) != std::string::npos;
}

// A directory where the README's relative paths resolve: build/apps/bitcheck is the binary under
// test, the specs, contract, Python impls and examples are the source tree's.
void lay_out_like_repository(const TempDir& dir) {
  std::filesystem::create_directories(dir / "build/apps");
  std::filesystem::create_symlink(binary, dir / "build/apps/bitcheck");
  for (const char* folder : {"sweeps", "contract", "python", "examples"})
    std::filesystem::create_directory_symlink(source_dir + "/" + folder, dir / folder);
}

// Runs one README command line from `dir`, as a user runs it from the repository root.
Run run_in(const TempDir& dir, const std::string& command) {
  return run_command(dir, "cd " + quote(dir.path()) + " && " + command);
}

}  // namespace

TEST_CASE("the README's commands run as written", "[cli][readme]") {
  const std::vector<std::string> commands = shell_commands(read_file(source_dir + "/README.md"));
  const std::string ci_script = read_file(source_dir + "/.ci/run");
  TempDir dir;
  lay_out_like_repository(dir);
  int bitcheck_commands = 0;
  for (const std::string& command : commands) {
    INFO("README command: " << command);
    if (command.rfind(bitcheck_prefix, 0) != 0) {
      CHECK(ci_runs(ci_script, command));
      continue;
    }
    ++bitcheck_commands;
    const Run run = run_in(dir, command);
    INFO("stdout: " << run.out << "\nstderr: " << run.err);
    CHECK(run.exit_code == 0);
  }
  // The quick start shows the main commands: a README whose blocks no longer parse fails here.
  CHECK(bitcheck_commands >= 8);
}

TEST_CASE("a README command that fails, or that nothing runs, is caught", "[cli][readme]") {
  const std::string planted =
      "```sh\n"
      "build/apps/bitcheck sweep --op no-such-op \\\n"
      "    --backend cpu   # exits 2\n"
      "scripts/no-such-script.sh\n"
      "```\n"
      "```text\n"
      "build/apps/bitcheck an output line, not a command\n"
      "```\n";
  const std::vector<std::string> commands = shell_commands(planted);
  REQUIRE(commands.size() == 2);
  CHECK(commands[0] == "build/apps/bitcheck sweep --op no-such-op     --backend cpu");
  TempDir dir;
  lay_out_like_repository(dir);
  CHECK(run_in(dir, commands[0]).exit_code == 2);
  CHECK_FALSE(ci_runs(read_file(source_dir + "/.ci/run"), commands[1]));
  CHECK(ci_runs(read_file(source_dir + "/.ci/run"), "scripts/sweep.sh"));
}
