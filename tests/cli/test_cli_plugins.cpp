// Impls from outside bitcheck through the binary: the example C ABI plugin (its invariant matmul
// passes, its split-K control drifts; list, repro and the spec's "plugins" field), each bad plugin
// (exit 2 naming the file and the field), a plugin run that errors or crashes (case `error`, the
// sweep completes), and Python impls on the numpy path with each Python failure mode.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

const std::string example_plugin = BITCHECK_EXAMPLE_PLUGIN;
const std::string test_plugin_dir = BITCHECK_TEST_PLUGIN_DIR;
const std::string python_examples = source_dir + "/python/examples";

std::string test_plugin(const std::string& variant) {
  return test_plugin_dir + "/libbitcheck_test_plugin_" + variant + ".so";
}

const std::string small_matmul =
    " --op matmul --backend cpu --dtype fp32 --pass forward --batch 1,3,7 --no-progress";

json results_of(const std::string& impl, const json& report) {
  json found = json::array();
  for (const auto& c : report["results"]) {
    if (c["impl"] == impl) found.push_back(c);
  }
  return found;
}

// A python3 that has numpy (the first of BITCHECK_PYTHON, python3, /usr/bin/python3), or "".
std::string python_with_numpy() {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("BITCHECK_PYTHON")) candidates.push_back(chosen);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const auto& python : candidates) {
    const std::string probe = python + " -c 'import numpy' > /dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

// Points bitcheck's Python worker at an interpreter with numpy and at python/examples.
class PythonEnvironment {
 public:
  PythonEnvironment() {
    python_ = python_with_numpy();
    setenv("BITCHECK_PYTHON", python_.c_str(), 1);
    setenv("PYTHONPATH", python_examples.c_str(), 1);
  }
  ~PythonEnvironment() {
    unsetenv("PYTHONPATH");
    unsetenv("BITCHECK_PYTHON");
  }
  PythonEnvironment(const PythonEnvironment&) = delete;
  PythonEnvironment& operator=(const PythonEnvironment&) = delete;
  bool ready() const { return !python_.empty(); }

 private:
  std::string python_;
};

// A test of Python impls on the numpy path passes, with a warning, where no python3 with numpy is.
#define SKIP_WITHOUT_NUMPY(python)          \
  if (!(python).ready()) {                  \
    WARN("no python3 with numpy: skipped"); \
    return;                                 \
  }

// One Python impl (module:function) over the fp32 matmul forward cases of batch 3, in this process
// (--no-isolate: the impl's worker is a child of the bitcheck process the test starts).
Run sweep_in_process(const TempDir& dir, const std::string& function) {
  return run_bitcheck(dir, "sweep --py-impl " + function +
                               " --op matmul --backend cpu --dtype fp32 --pass forward --batch 3"
                               " --no-progress --no-isolate --impl py:" +
                               function + " --out " + quote(dir.path()));
}

}  // namespace

TEST_CASE("the example plugin's fixed-order matmul passes and its split-K control drifts",
          "[cli][plugins]") {
  TempDir dir;
  Run list = run_bitcheck(dir, "list --plugin " + quote(example_plugin));
  REQUIRE(list.exit_code == 0);
  CHECK(list.out.find("matmul/plugin:example/fixed-order [cpu]") != std::string::npos);
  CHECK(list.out.find("* matmul/plugin:example/split-k-by-batch [cpu]") != std::string::npos);

  Run sweep =
      run_bitcheck(dir, "sweep --plugin " + quote(example_plugin) + small_matmul +
                            " --impl plugin:example/fixed-order,plugin:example/split-k-by-batch"
                            " --out " +
                            quote(dir.path()));
  INFO(sweep.out << sweep.err);
  REQUIRE(sweep.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  CHECK(report["meta"]["plugin_abi_version"] == 1);
  REQUIRE(report["meta"]["plugins"].size() == 1);
  CHECK(report["meta"]["isolation"]["mode"] == "worker process");
  json invariant = results_of("plugin:example/fixed-order", report);
  REQUIRE(invariant.size() == 6);
  for (const auto& c : invariant) CHECK(c["verdict"] == "pass");
  bool control_drifted = false;
  for (const auto& c : results_of("plugin:example/split-k-by-batch", report)) {
    control_drifted = control_drifted || c["verdict"] == "drift";
  }
  CHECK(control_drifted);

  // repro reloads the plugin the report's meta names, and gets the same bits.
  std::string drift_id;
  for (const auto& c : results_of("plugin:example/split-k-by-batch", report)) {
    if (c["verdict"] == "drift") drift_id = c["id"];
  }
  REQUIRE_FALSE(drift_id.empty());
  Run repro =
      run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " + quote(drift_id));
  INFO(repro.out << repro.err);
  CHECK(repro.exit_code == 0);
  CHECK(repro.out.find("verdict: drift (report: drift)") != std::string::npos);
  CHECK(repro.out.find("-> same bits") != std::string::npos);
}

TEST_CASE("a spec's plugins field loads the plugin", "[cli][plugins]") {
  TempDir dir;
  std::ofstream(dir / "spec.json")
      << json{{"schema_version", 1},
              {"plugins", {example_plugin}},
              {"defaults", {{"impls", {"plugin:example/fixed-order"}}}},
              {"ops", {{"matmul", {{"shapes", {{{"N", 8}, {"K", 16}}}}}}}}}
             .dump();
  Run sweep = run_bitcheck(
      dir, "sweep --spec " + quote(dir / "spec.json") +
               " --backend cpu --dtype fp32 --pass forward --batch 1,3 --no-progress --out " +
               quote(dir.path()));
  INFO(sweep.out << sweep.err);
  REQUIRE(sweep.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  CHECK(results_of("plugin:example/fixed-order", report).size() == 2);
}

TEST_CASE("bad plugins exit 2 naming the plugin file and the field", "[cli][plugins][bad-input]") {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"wrong_abi", "abi_version: expected 1"},
      {"missing_symbol", "bitcheck_plugin_register: expected the exported symbol"},
      {"unknown_op", "impl \"bad-op\" field op: expected an op bitcheck has"},
      {"bad_dtype",
       "impl \"bad-dtype\" field dtypes: expected dtypes bitcheck runs (fp32, bf16, fp16), got "
       "\"fp8\""},
  };
  for (const auto& [variant, message] : cases) {
    Run run = run_bitcheck(dir, "sweep --plugin " + quote(test_plugin(variant)) + small_matmul +
                                    " --out " + quote(dir / "out"));
    INFO(variant << ": " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find(test_plugin(variant) + ": " + message) != std::string::npos);
  }
  Run missing = run_bitcheck(dir, "list --plugin " + quote(dir / "no-such-plugin.so"));
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no-such-plugin.so: (file): expected a shared library") !=
        std::string::npos);
}

TEST_CASE(
    "a plugin run that returns an error or crashes is that case's error and the sweep completes",
    "[cli][plugins][isolation]") {
  TempDir dir;
  Run sweep = run_bitcheck(
      dir, "sweep --plugin " + quote(test_plugin("faulty")) + small_matmul +
               " --impl plugin:test/returns-error,plugin:test/crashes,cpu-fixed-order --out " +
               quote(dir.path()));
  INFO(sweep.out << sweep.err);
  CHECK(sweep.exit_code == 3);
  json report = json::parse(read_file(dir / "report.json"));
  for (const auto& c : results_of("plugin:test/returns-error", report)) {
    CHECK(c["verdict"] == "error");
    CHECK(c["reason"].get<std::string>().find("the plugin refused this call on purpose") !=
          std::string::npos);
  }
  json crashed = results_of("plugin:test/crashes", report);
  REQUIRE(crashed.size() == 6);
  for (const auto& c : crashed) {
    CHECK(c["verdict"] == "error");
    CHECK(c["reason"].get<std::string>().find("SIGSEGV") != std::string::npos);
  }
  for (const auto& c : results_of("cpu-fixed-order", report)) CHECK(c["verdict"] == "pass");
}

TEST_CASE("a numpy Python impl passes, its control drifts, and repro reruns it", "[cli][python]") {
  PythonEnvironment python;
  SKIP_WITHOUT_NUMPY(python);
  TempDir dir;
  Run list = run_bitcheck(dir, "list --py-impl numpy_matmul:fixed_order");
  INFO(list.err);
  REQUIRE(list.exit_code == 0);
  CHECK(list.out.find("matmul/py:numpy_matmul:fixed_order [cpu]") != std::string::npos);
  Run sweep = run_bitcheck(
      dir, "sweep --py-impl numpy_matmul:fixed_order --py-impl numpy_matmul:split_k_by_batch" +
               small_matmul +
               " --impl py:numpy_matmul:fixed_order,py:numpy_matmul:split_k_by_batch --out " +
               quote(dir.path()));
  INFO(sweep.out << sweep.err);
  REQUIRE(sweep.exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  CHECK(report["meta"]["py_impls"].size() == 2);
  json invariant = results_of("py:numpy_matmul:fixed_order", report);
  REQUIRE(invariant.size() == 6);
  for (const auto& c : invariant) CHECK(c["verdict"] == "pass");
  std::string drift_id;
  for (const auto& c : results_of("py:numpy_matmul:split_k_by_batch", report)) {
    if (c["verdict"] == "drift") drift_id = c["id"];
  }
  REQUIRE_FALSE(drift_id.empty());
  Run repro =
      run_bitcheck(dir, "repro " + quote(dir / "report.json") + " --case " + quote(drift_id));
  INFO(repro.out << repro.err);
  CHECK(repro.exit_code == 0);
  CHECK(repro.out.find("-> same bits") != std::string::npos);
}

TEST_CASE("an undeclared Python function observes the op it is named after, one of the registry's",
          "[cli][python]") {
  PythonEnvironment python;
  SKIP_WITHOUT_NUMPY(python);
  TempDir dir;
  Run named = run_bitcheck(dir, "list --py-impl numpy_matmul:matmul");
  INFO(named.err);
  REQUIRE(named.exit_code == 0);
  CHECK(named.out.find("~ matmul/py:numpy_matmul:matmul [cpu] undeclared Python function "
                       "(observation)") != std::string::npos);
  // A name that is no op is refused, and the ops the refusal lists are the registry's, in order.
  Run list = run_bitcheck(dir, "list --json");
  REQUIRE(list.exit_code == 0);
  const json listed = json::parse(list.out);
  std::string ops;
  for (const auto& op : listed["ops"])
    ops += (ops.empty() ? "" : ", ") + op["name"].get<std::string>();
  Run unnamed = run_bitcheck(dir, "list --py-impl numpy_matmul:_dot_in_order");
  INFO(unnamed.err << "\nthe registry's ops: " << ops);
  CHECK(unnamed.exit_code == 2);
  CHECK(unnamed.err.find("its name is not an op (" + ops + ")") != std::string::npos);
}

TEST_CASE("a bitcheck process killed while a Python impl holds its buffer leaves no shared memory",
          "[cli][python]") {
  // The buffer's name is unlinked once the worker has mapped it: a process that ends without its
  // destructors (killed, or a sweep worker past its case timeout) left a /dev/shm/bitcheck-PID-*
  // segment behind, and a later process that got the same pid failed its first call (EEXIST).
  PythonEnvironment python;
  SKIP_WITHOUT_NUMPY(python);
  TempDir dir;
  const std::string pid_file = dir / "bitcheck.pid";
  setenv("BITCHECK_TEST_PID_FILE", pid_file.c_str(), 1);
  Run sweep = sweep_in_process(dir, "broken:kills_bitcheck");
  unsetenv("BITCHECK_TEST_PID_FILE");
  INFO(sweep.out << sweep.err);
  CHECK(sweep.exit_code != 0);
  REQUIRE(std::filesystem::exists(pid_file));
  const std::string prefix = "bitcheck-" + read_file(pid_file) + "-";
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  INFO("left in /dev/shm: " << left.size() << (left.empty() ? "" : " such as " + left[0]));
  CHECK(left.empty());
}

TEST_CASE("a Python worker that dies is replaced and the new one gets the shared buffer",
          "[cli][python]") {
  PythonEnvironment python;
  SKIP_WITHOUT_NUMPY(python);
  TempDir dir;
  Run sweep = sweep_in_process(dir, "broken:dies_every_second_call");
  INFO(sweep.out << sweep.err);
  CHECK(sweep.exit_code == 3);
  json results =
      results_of("py:broken:dies_every_second_call", json::parse(read_file(dir / "report.json")));
  REQUIRE(results.size() == 2);
  for (const auto& c : results) {
    // Each case's second call ends its worker; the first call of the second case runs on a new
    // worker, which opens the buffer under the name bitcheck gave it anew (the old one was unlinked
    // once mapped): a failure to open it would be this case's reason instead.
    INFO(c["id"] << ": " << c["reason"]);
    CHECK(c["verdict"] == "error");
    CHECK(c["reason"].get<std::string>().find("exited with status 3") != std::string::npos);
  }
}

TEST_CASE("Python failures are case errors with the reason and the sweep completes",
          "[cli][python]") {
  PythonEnvironment python;
  SKIP_WITHOUT_NUMPY(python);
  TempDir dir;
  const std::string impls =
      "py:broken:raises,py:broken:wrong_shape,py:broken:wrong_dtype,py:broken:hangs";
  Run sweep = run_bitcheck(
      dir,
      "sweep --py-impl broken:raises --py-impl broken:wrong_shape --py-impl broken:wrong_dtype"
      " --py-impl broken:hangs --op matmul --backend cpu --dtype fp32 --pass forward --batch 3"
      " --no-progress --case-timeout 10 --impl " +
          impls + " --out " + quote(dir.path()));
  INFO(sweep.out << sweep.err);
  CHECK(sweep.exit_code == 3);
  json report = json::parse(read_file(dir / "report.json"));
  // The first layout run is the canonical one (batch 1): its row count is in the messages.
  const std::pair<std::string, std::string> expected[] = {
      {"py:broken:raises", "RuntimeError: this impl raises on purpose"},
      {"py:broken:raises", "Traceback (most recent call last)"},
      {"py:broken:wrong_shape", "matmul output y: expected shape ("},
      {"py:broken:wrong_shape", ", 64) float32, got shape ("},
      {"py:broken:wrong_shape", ", 65) float32"},
      {"py:broken:wrong_dtype", ", 64) float32, got shape ("},
      {"py:broken:wrong_dtype", ", 64) float64"},
      {"py:broken:hangs", "did not finish within the per-case limit of 10 s"},
  };
  for (const auto& [impl, reason] : expected) {
    json results = results_of(impl, report);
    REQUIRE(results.size() == 2);
    INFO(impl << ": " << results[0]["reason"]);
    CHECK(results[0]["verdict"] == "error");
    CHECK(results[0]["reason"].get<std::string>().find(reason) != std::string::npos);
  }

  Run undeclared = run_bitcheck(dir, "list --py-impl broken:no_such_function");
  CHECK(undeclared.exit_code == 2);
  CHECK(
      undeclared.err.find("broken:no_such_function: --py-impl: expected an importable function") !=
      std::string::npos);
}

namespace {
// The interpreter the first python3 on PATH runs (its sys.executable, past any shim), or "".
std::string python3_on_path() {
  std::string path;
  if (FILE* pipe = popen("python3 -c 'import sys; print(sys.executable)' 2> /dev/null", "r")) {
    char line[4096];
    if (fgets(line, sizeof line, pipe)) path = line;
    pclose(pipe);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return path;
}
}  // namespace

TEST_CASE("a Python impl's import error names the interpreter that ran and BITCHECK_PYTHON",
          "[cli][python]") {
  const std::string real_python = python3_on_path();
  if (real_python.empty()) {
    WARN("no python3 on PATH: skipped");
    return;
  }
  TempDir dir;
  // A python3 first on PATH that cannot import numpy, like a version manager's shim without it:
  // -S leaves out site-packages, where numpy lives.
  std::filesystem::create_directories(dir / "shim");
  std::ofstream(dir / "shim/python3") << "#!/bin/sh\nexec " << quote(real_python) << " -S \"$@\"\n";
  std::filesystem::permissions(dir / "shim/python3", std::filesystem::perms::owner_all);
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", (dir / "shim:" + old_path).c_str(), 1);
  setenv("PYTHONPATH", python_examples.c_str(), 1);
  unsetenv("BITCHECK_PYTHON");
  Run unset = run_bitcheck(dir, "sweep --py-impl numpy_matmul:fixed_order" + small_matmul +
                                    " --out " + quote(dir / "out"));
  setenv("BITCHECK_PYTHON", (dir / "shim/python3").c_str(), 1);
  Run chosen = run_bitcheck(dir, "list --py-impl numpy_matmul:fixed_order");
  unsetenv("BITCHECK_PYTHON");
  unsetenv("PYTHONPATH");
  setenv("PATH", old_path.c_str(), 1);

  INFO(unset.err);
  CHECK(unset.exit_code == 2);
  CHECK_THAT(unset.err, Catch::Contains("No module named 'numpy'"));
  // The interpreter the shim started, and how to choose another.
  CHECK_THAT(unset.err,
             Catch::Contains("bitcheck's Python worker ran " + real_python + " (Python "));
  CHECK_THAT(unset.err, Catch::Contains("the first python3 on PATH, as BITCHECK_PYTHON is unset"));
  CHECK_THAT(unset.err, Catch::Contains("which cannot import numpy: set BITCHECK_PYTHON to an "
                                        "interpreter that can"));
  INFO(chosen.err);
  CHECK(chosen.exit_code == 2);
  CHECK_THAT(chosen.err, Catch::Contains("chosen by BITCHECK_PYTHON=" + dir / "shim/python3"));
}
