// Error types that map to bitcheck's exit codes: BadInput -> 2 (names file, JSON path, expected),
// everything else that escapes a case -> 3; and CaptureUnsupported, which skips a layout.
#pragma once
#include <stdexcept>
#include <string>

namespace bitcheck {

enum ExitCode : int { exit_pass = 0, exit_findings = 1, exit_bad_input = 2, exit_internal = 3 };

class BadInput : public std::runtime_error {
 public:
  BadInput(std::string file, std::string json_path, std::string expected)
      : std::runtime_error(file + ": " + json_path + ": expected " + expected),
        file_(std::move(file)),
        json_path_(std::move(json_path)),
        expected_(std::move(expected)) {}
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }
  const std::string& expected() const { return expected_; }

 private:
  std::string file_, json_path_, expected_;
};

// Thrown by an impl's run() in a captured layout (the graph layout) when its launches turn out not
// to be capturable (an impl from outside that synchronizes, copies to the host or launches on
// another stream under capture): the runner skips the layout with this reason, the case goes on.
class CaptureUnsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace bitcheck
