// Helpers for the CLI tests: a temporary directory and running the bitcheck binary with captured
// output and exit code.
#pragma once
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

const std::string binary = BITCHECK_BINARY;
const std::string source_dir = BITCHECK_SOURCE_DIR;
const std::string data_dir = source_dir + "/tests/data/";

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "bitcheck-cli-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream stream(path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
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

// Runs the binary with `args` (already quoted where needed), capturing stdout and stderr.
Run run_bitcheck(const TempDir& dir, const std::string& args) {
  const std::string command = quote(binary) + " " + args + " > " + quote(dir / "stdout") + " 2> " + quote(dir / "stderr");
  const int status = std::system(command.c_str());
  Run run;
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.exit_code = -WTERMSIG(status);
  run.out = read_file(dir / "stdout");
  run.err = read_file(dir / "stderr");
  return run;
}

}  // namespace
