// The printer: a sweep writes its summary, report path and notes through the printer it is given,
// and nothing straight to stdout or stderr.
#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "core/printer.h"
#include "manifest.h"
#include "sweep/sweep.h"

using namespace bitcheck;

namespace {

// Captures what a stream receives while it lives.
class Capture {
 public:
  explicit Capture(std::ostream& stream) : stream_(stream), saved_(stream.rdbuf(text_.rdbuf())) {}
  ~Capture() { stream_.rdbuf(saved_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostream& stream_;
  std::ostringstream text_;
  std::streambuf* saved_;
};

}  // namespace

TEST_CASE("a sweep prints through its printer and never straight to stdout or stderr",
          "[printer]") {
  Registry registry;
  register_all(registry);
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "bitcheck-printer";
  std::filesystem::remove_all(out);

  std::ostringstream results, notes;
  StreamPrinter printer(results, notes, true);
  SweepOptions options;
  options.overrides.ops = {"rmsnorm"};
  options.overrides.impls = {"cpu-fixed-order"};
  options.overrides.dtypes = {"bf16"};
  options.overrides.passes = {"forward"};
  options.overrides.batches = {3};
  options.overrides.backend = "cpu";
  options.out_dir = out.string();
  options.argv = {"bitcheck", "sweep"};
  options.printer = &printer;

  int exit_code = -1;
  std::string stdout_text, stderr_text;
  {
    Capture stdout_capture(std::cout), stderr_capture(std::cerr);
    exit_code = run_sweep(options, registry);
    stdout_text = stdout_capture.text();
    stderr_text = stderr_capture.text();
  }
  CHECK(exit_code == 0);
  CHECK(stdout_text.empty());
  CHECK(stderr_text.empty());
  CHECK(results.str().find("report: " + (out / "report.json").string()) != std::string::npos);
  CHECK(results.str().find("pass") != std::string::npos);
  // A live printer drew progress lines and cleared them before the summary.
  CHECK(notes.str().find("[1/") != std::string::npos);
  CHECK(notes.str().find("\r\033[K") != std::string::npos);
  std::filesystem::remove_all(out);
}

TEST_CASE("a printer that is not live shows no progress lines, only notes", "[printer]") {
  std::ostringstream results, notes;
  StreamPrinter printer(results, notes, false);
  printer.progress("[1/2] case");
  printer.end_progress();
  printer.note("a note");
  printer.result("a result\n");
  CHECK(notes.str() == "a note\n");
  CHECK(results.str() == "a result\n");
}
