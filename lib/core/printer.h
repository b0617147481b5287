// Where the harness's messages go: results for the user (the terminal summary, report paths),
// notes (faults, warnings, kept logs) and progress lines. The CLI prints to the terminal; a sweep
// worker or a test passes its own printer, so nothing in lib/ writes to stdout or stderr itself.
#pragma once
#include <iosfwd>
#include <string>

namespace bitcheck {

class Printer {
 public:
  virtual ~Printer() = default;
  // Text for the user, written as given (it carries its own newlines).
  virtual void result(const std::string& text) = 0;
  // A line about the run itself (a fault, a warning, where logs were kept); a newline is added.
  virtual void note(const std::string& line) = 0;
  // A status line that the next one replaces; end_progress() clears it. Only a live printer (a
  // terminal) shows them: a log gets notes instead, at a rate the caller chooses.
  virtual void progress(const std::string& line) = 0;
  virtual void end_progress() = 0;
  virtual bool live() const = 0;
};

// Results to one stream, notes and progress to another; live: progress lines are redrawn in place.
class StreamPrinter : public Printer {
 public:
  StreamPrinter(std::ostream& results, std::ostream& notes, bool live);
  void result(const std::string& text) override;
  void note(const std::string& line) override;
  void progress(const std::string& line) override;
  void end_progress() override;
  bool live() const override { return live_; }

 private:
  std::ostream& results_;
  std::ostream& notes_;
  bool live_;
  bool progress_shown_ = false;
};

// Results to stdout, notes to stderr, live when stderr is a terminal.
Printer& terminal_printer();

}  // namespace bitcheck
