// Helpers for the CLI tests: a temporary directory and running the bitcheck binary with captured
// output and exit code. Every report a run leaves in its directory is checked against
// docs/report.schema.json.
#pragma once
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "schema/json_schema.h"
#include "temp_dir.h"

namespace {

const std::string binary = BITCHECK_BINARY;
const std::string source_dir = BITCHECK_SOURCE_DIR;
const std::string data_dir = source_dir + "/tests/data/";

using test_support::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream stream(path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

// A report's results without their timings: what two runs of the same cases must agree on.
[[maybe_unused]] nlohmann::json results_without_timings(const nlohmann::json& report) {
  nlohmann::json results = nlohmann::json::array();
  for (auto c : report["results"]) {
    c.erase("timings");
    results.push_back(c);
  }
  return results;
}

std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct Run {
  int exit_code = -1;  // -N when killed by signal N
  std::string out, err;
};

// Checks one report against the schema; a report is a JSON object with "tool": "bitcheck".
void check_report_valid(const std::string& path, const nlohmann::json& report) {
  static const schema_check::JsonSchema schema(
      nlohmann::json::parse(read_file(source_dir + "/docs/report.schema.json")));
  std::vector<std::string> errors = schema.validate(report);
  std::string listed;
  for (std::size_t i = 0; i < errors.size() && i < 20; ++i) listed += "\n  " + errors[i];
  INFO("report " << path << " violates docs/report.schema.json:" << listed);
  CHECK(errors.empty());
}

// Every report (a JSON file with "tool": "bitcheck") under `directory`, each version checked once.
void check_reports_in(const std::string& directory) {
  static std::map<std::string, std::pair<std::uintmax_t, std::filesystem::file_time_type>> checked;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory, ignored)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".json") continue;
    const std::string path = entry.path().string();
    const auto version = std::make_pair(entry.file_size(), entry.last_write_time());
    auto seen = checked.find(path);
    if (seen != checked.end() && seen->second == version) continue;
    checked[path] = version;
    nlohmann::json document = nlohmann::json::parse(read_file(path), nullptr, false);
    if (document.is_object() && document.value("tool", "") == "bitcheck")
      check_report_valid(path, document);
  }
}

// Runs a shell command line, capturing stdout and stderr in `dir`; then checks the reports the run
// left in `dir` against the schema.
Run run_command(const TempDir& dir, const std::string& command) {
  const std::string line = command + " > " + quote(dir / "stdout") + " 2> " + quote(dir / "stderr");
  const int status = std::system(line.c_str());
  Run run;
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.exit_code = -WTERMSIG(status);
  run.out = read_file(dir / "stdout");
  run.err = read_file(dir / "stderr");
  check_reports_in(dir.path());
  return run;
}

// Runs the binary with `args` (already quoted where needed), as run_command does.
[[maybe_unused]] Run run_bitcheck(const TempDir& dir, const std::string& args) {
  return run_command(dir, quote(binary) + " " + args);
}

// A run with what it cost: wall time and the largest resident set of the process (and of any
// child it waited for), from wait4.
struct MeasuredRun {
  Run run;
  double wall_seconds = 0;
  long max_resident_kib = 0;
};

[[maybe_unused]] MeasuredRun run_bitcheck_measured(const TempDir& dir, const std::string& args) {
  const std::string command = "exec " + quote(binary) + " " + args + " > " + quote(dir / "stdout") +
                              " 2> " + quote(dir / "stderr");
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(child, &status, 0, &usage) != child) throw std::runtime_error("wait4 failed");
  MeasuredRun measured;
  measured.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.max_resident_kib = usage.ru_maxrss;  // kilobytes on Linux
  if (WIFEXITED(status)) measured.run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) measured.run.exit_code = -WTERMSIG(status);
  measured.run.out = read_file(dir / "stdout");
  measured.run.err = read_file(dir / "stderr");
  return measured;
}

}  // namespace
