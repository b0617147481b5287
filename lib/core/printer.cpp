// The stream printer and the terminal's.
#include "core/printer.h"

#include <unistd.h>

#include <iostream>

namespace bitcheck {

StreamPrinter::StreamPrinter(std::ostream& results, std::ostream& notes, bool live)
    : results_(results), notes_(notes), live_(live) {}

void StreamPrinter::result(const std::string& text) {
  end_progress();
  results_ << text << std::flush;
}

void StreamPrinter::note(const std::string& line) {
  end_progress();
  notes_ << line << "\n" << std::flush;
}

void StreamPrinter::progress(const std::string& line) {
  if (!live_) return;
  notes_ << "\r\033[K" << line << std::flush;
  progress_shown_ = true;
}

void StreamPrinter::end_progress() {
  if (!progress_shown_) return;
  notes_ << "\r\033[K" << std::flush;
  progress_shown_ = false;
}

Printer& terminal_printer() {
  static StreamPrinter printer(std::cout, std::cerr, isatty(STDERR_FILENO) != 0);
  return printer;
}

}  // namespace bitcheck
