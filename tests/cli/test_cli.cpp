// The bitcheck binary: exit codes, messages and reports. Every bad input exits 2 naming the file,
// the JSON path and what was expected, and writes no report.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

std::vector<std::string> default_spec_ops() {
  json spec = json::parse(read_file(source_dir + "/sweeps/default.json"));
  std::vector<std::string> ops;
  // An entry is keyed by its op, or by a label naming the op in "op".
  for (const auto& [name, entry] : spec["ops"].items()) {
    const std::string op = entry.value("op", name);
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  }
  return ops;
}

struct BadCall {
  const char* what;
  std::string args;
  std::vector<std::string> on_stderr;  // file, JSON path, expectation
};

void check_bad_input(const BadCall& bad) {
  TempDir dir;
  const std::string out = dir / "out";
  Run run = run_bitcheck(dir, "sweep --no-progress --out " + quote(out) + " " + bad.args);
  INFO(bad.what << ": bitcheck sweep " << bad.args << "\nstdout: " << run.out
                << "\nstderr: " << run.err);
  CHECK(run.exit_code == 2);
  for (const auto& fragment : bad.on_stderr) CHECK_THAT(run.err, Catch::Contains(fragment));
  CHECK_FALSE(std::filesystem::exists(out + "/report.json"));
}

}  // namespace

TEST_CASE("version and help exit 0", "[cli]") {
  TempDir dir;
  Run version = run_bitcheck(dir, "--version");
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.out, Catch::Contains("bitcheck"));
  Run help = run_bitcheck(dir, "--help");
  CHECK(help.exit_code == 0);
  for (const char* subcommand : {"sweep", "list", "contract"})
    CHECK_THAT(help.out, Catch::Contains(subcommand));
  Run sweep_help = run_bitcheck(dir, "sweep --help");
  CHECK(sweep_help.exit_code == 0);
  CHECK_THAT(sweep_help.out, Catch::Contains("--batch"));
}

TEST_CASE("list shows every op, impl, dtype and layout", "[cli]") {
  TempDir dir;
  Run text = run_bitcheck(dir, "list");
  REQUIRE(text.exit_code == 0);
  for (const auto& op : default_spec_ops()) CHECK_THAT(text.out, Catch::Contains(op));
  Run as_json = run_bitcheck(dir, "list --json");
  REQUIRE(as_json.exit_code == 0);
  json list = json::parse(as_json.out);
  REQUIRE(list["ops"].is_array());
  for (const auto& op : default_spec_ops()) {
    bool listed = false;
    for (const auto& entry : list["ops"]) listed = listed || entry["name"] == op;
    INFO("op " << op);
    CHECK(listed);
  }
  for (const auto& op : list["ops"]) {
    const std::string name = op["name"];
    CHECK_THAT(text.out, Catch::Contains(name));
    for (const auto& impl : op["impls"]) {
      CHECK_THAT(text.out, Catch::Contains(name + "/" + impl["name"].get<std::string>()));
    }
  }
  CHECK(list["dtypes"]["bf16"] == "mandatory");
  CHECK(list["dtypes"]["fp8"] == "out_of_scope");
  CHECK(list["backends"]["cpu"]["available"] == true);
  CHECK(list["layouts"].size() == 8);
  CHECK(list["layouts"].back() == "graph");
}

TEST_CASE("contract check accepts the contract and refuses a bad one naming file and path",
          "[cli]") {
  TempDir dir;
  Run good = run_bitcheck(dir, "contract check");
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.out, Catch::Contains("contract OK"));
  Run on_disk = run_bitcheck(
      dir, "contract check --contract " + quote(source_dir + "/contract/contract.json"));
  CHECK(on_disk.exit_code == 0);
  Run show = run_bitcheck(dir, "contract show");
  REQUIRE(show.exit_code == 0);
  CHECK(json::parse(show.out)["dtypes"]["bf16"]["status"] == "mandatory");

  json contract = json::parse(read_file(source_dir + "/contract/contract.json"));
  contract["thresholds"]["matmul"]["bf16"]["atol"] = -1;
  const std::string bad_path = dir / "bad-contract.json";
  std::ofstream(bad_path) << contract.dump(2);
  Run bad = run_bitcheck(dir, "contract check --contract " + quote(bad_path));
  INFO(bad.err);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains(bad_path) &&
                          Catch::Contains("$.thresholds.matmul.bf16.atol") &&
                          Catch::Contains("non-negative"));

  const std::string invalid = data_dir + "contract_invalid_json.json";
  Run invalid_json = run_bitcheck(dir, "contract check --contract " + quote(invalid));
  CHECK(invalid_json.exit_code == 2);
  CHECK_THAT(invalid_json.err, Catch::Contains(invalid) && Catch::Contains("valid JSON"));

  Run missing = run_bitcheck(dir, "contract check --contract /nonexistent/contract.json");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("/nonexistent/contract.json"));
}

TEST_CASE("sweep of the CPU matmul impls exits 0 and writes the report", "[cli][sweep]") {
  TempDir dir;
  const std::string out = dir / "out";
  Run run = run_bitcheck(
      dir, "sweep --op matmul --backend cpu --batch 1,7 --no-progress --out " + quote(out));
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("report: " + out + "/report.json"));
  REQUIRE(std::filesystem::exists(out + "/report.json"));
  json report = json::parse(read_file(out + "/report.json"));
  CHECK(report["schema_version"] == 1);
  CHECK(report["summary"]["exit_code"] == 0);
  CHECK(report["summary"]["harness_failures"].empty());
  CHECK(report["first_failing_op"].is_null());
  CHECK(report["meta"]["argv"][1] == "sweep");
  CHECK_THAT(report["meta"]["command_line"].get<std::string>(), Catch::Contains("--batch 1,7"));
  REQUIRE_FALSE(report["results"].empty());
  bool saw_control_drift = false;
  for (const auto& result : report["results"]) {
    CHECK(result["op"] == "matmul");
    CHECK(result["backend"] == "cpu");
    CHECK((result["rows"] == 1 || result["rows"] == 7));
    if (result["control"] == false)
      CHECK((result["verdict"] == "pass" || result["verdict"] == "skipped"));
    saw_control_drift =
        saw_control_drift || (result["control"] == true && result["verdict"] == "drift");
  }
  CHECK(saw_control_drift);
  // Nothing but the report is left in the output directory.
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator(out))
    entries.push_back(entry.path().filename().string());
  CHECK(entries == std::vector<std::string>{"report.json"});
}

TEST_CASE("a CPU case too large for host memory is skipped with its size, not an error",
          "[cli][sweep][memory]") {
  TempDir dir;
  const std::string out = dir / "out";
  Run run = run_bitcheck(dir, "sweep --spec " + quote(data_dir + "spec_huge_cpu.json") +
                                  " --backend cpu --no-progress --out " + quote(out));
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  json report = json::parse(read_file(out + "/report.json"));
  REQUIRE(report["results"].size() == 2);
  for (const auto& result : report["results"]) {
    if (result["dims"]["N"] == 8) {
      CHECK(result["verdict"] == "pass");  // control: the small case of the same spec runs
      continue;
    }
    CHECK(result["verdict"] == "skipped");
    CHECK_THAT(result["reason"].get<std::string>(),
               Catch::StartsWith("needs ~") && Catch::Contains("GiB of host memory"));
  }
}

TEST_CASE("bad spec files exit 2 naming file, JSON path and expectation, with no report",
          "[cli][bad-input]") {
  const std::vector<BadCall> cases = {
      {"invalid JSON",
       "--spec " + quote(data_dir + "spec_invalid_json.json"),
       {data_dir + "spec_invalid_json.json", ": $: ", "valid JSON"}},
      {"unknown op",
       "--spec " + quote(data_dir + "spec_unknown_op.json"),
       {data_dir + "spec_unknown_op.json", "$.ops.nope", "a registered op"}},
      {"unknown impl",
       "--spec " + quote(data_dir + "spec_unknown_impl.json"),
       {data_dir + "spec_unknown_impl.json", "$.ops.matmul.impls[1]", "an impl of matmul",
        "cpu-nope"}},
      {"unknown dtype",
       "--spec " + quote(data_dir + "spec_unknown_dtype.json"),
       {data_dir + "spec_unknown_dtype.json", "$.ops.matmul.dtypes[1]", "fp64"}},
      {"zero batch",
       "--spec " + quote(data_dir + "spec_zero_batch.json"),
       {data_dir + "spec_zero_batch.json", "$.ops.matmul.batches[1]", "got 0"}},
      {"negative batch",
       "--spec " + quote(data_dir + "spec_negative_batch.json"),
       {data_dir + "spec_negative_batch.json", "$.defaults.batches[0]", "got -3"}},
      {"missing field",
       "--spec " + quote(data_dir + "spec_missing_shapes.json"),
       {data_dir + "spec_missing_shapes.json", "$.ops.matmul.shapes", "missing"}},
      {"wrong type",
       "--spec " + quote(data_dir + "spec_batches_string.json"),
       {data_dir + "spec_batches_string.json", "$.defaults.batches", "or \"switch-points\""}},
      {"unknown field",
       "--spec " + quote(data_dir + "spec_unknown_field.json"),
       {data_dir + "spec_unknown_field.json", "$.ops.matmul.batch", "no such field"}},
      {"unknown layout",
       "--spec " + quote(data_dir + "spec_unknown_layout.json"),
       {data_dir + "spec_unknown_layout.json", "$.ops.rmsnorm.layouts[1]", "zigzag"}},
      {"missing dim",
       "--spec " + quote(data_dir + "spec_missing_dim.json"),
       {data_dir + "spec_missing_dim.json", "$.ops.matmul.shapes[1].K", "missing"}},
      {"duplicate key",
       "--spec " + quote(data_dir + "spec_duplicate_key.json"),
       {data_dir + "spec_duplicate_key.json", "$.ops.matmul.shapes[1].N", "appears twice"}},
      {"unknown id distribution",
       "--spec " + quote(data_dir + "spec_unknown_ids.json"),
       {data_dir + "spec_unknown_ids.json", "$.ops.embedding.ids",
        "\"uniform\", \"zipf\" or \"few\"", "zipfian"}},
      {"id distribution for an op without token ids",
       "--spec " + quote(data_dir + "spec_ids_without_token_ids.json"),
       {data_dir + "spec_ids_without_token_ids.json", "$.ops.lm_head.ids", "no token-id input"}},
      {"unreadable path",
       "--spec /nonexistent.json",
       {"/nonexistent.json", ": $: ", "readable file"}},
      {"invalid contract",
       "--contract " + quote(data_dir + "contract_invalid_json.json"),
       {data_dir + "contract_invalid_json.json", "valid JSON"}},
  };
  for (const auto& bad : cases) check_bad_input(bad);
}

TEST_CASE("bad command-line values exit 2 naming the flag and expectation, with no report",
          "[cli][bad-input]") {
  const std::vector<BadCall> cases = {
      {"unknown op", "--op nope", {"command line", "--op", "\"nope\""}},
      {"unknown op among good ones", "--op matmul,nope", {"command line", "--op", "\"nope\""}},
      {"unknown impl", "--impl nope", {"command line", "--impl", "\"nope\""}},
      {"unknown dtype", "--dtype fp64", {"command line", "--dtype", "\"fp64\""}},
      {"zero batch", "--batch 0", {"command line", "--batch", "got 0"}},
      {"negative batch", "--batch -3", {"command line", "--batch", "-3"}},
      {"negative batch in a list", "--batch 1,-3", {"command line", "--batch", "-3"}},
      {"unknown backend", "--backend gpu", {"command line", "--backend", "auto, cpu or cuda"}},
      {"unknown layout", "--layout zigzag", {"command line", "--layout", "zigzag"}},
      {"unknown pass", "--pass sideways", {"command line", "--pass", "sideways"}},
      {"non-numeric batch", "--batch abc", {"--batch", "abc"}},
      {"bad seed", "--seed abc", {"command line", "--seed", "abc"}},
      {"negative seed", "--seed -1", {"command line", "--seed", "-1"}},
      {"one repeat", "--repeats 1", {"command line", "--repeats", "at least 2"}},
      {"unknown id distribution",
       "--ids zipfian",
       {"command line", "--ids", "\"uniform\", \"zipf\" or \"few\"", "zipfian"}},
      {"id distribution for ops without token ids",
       "--ids zipf --op rmsnorm",
       {"command line", "--ids", "token-id inputs"}},
      {"unknown op in the spec wins over filters",
       "--op matmul --spec " + quote(data_dir + "spec_unknown_op.json"),
       {"$.ops.nope"}},
  };
  for (const auto& bad : cases) check_bad_input(bad);
}

TEST_CASE("unknown flags and subcommands exit 2", "[cli][bad-input]") {
  TempDir dir;
  CHECK(run_bitcheck(dir, "sweep --frobnicate").exit_code == 2);
  CHECK(run_bitcheck(dir, "frobnicate").exit_code == 2);
  CHECK(run_bitcheck(dir, "").exit_code == 2);
  CHECK(run_bitcheck(dir, "contract").exit_code == 2);
  CHECK(run_bitcheck(dir, "--batch 3").exit_code == 2);
}

// Defaults apply to every op; an impl named there that an op lacks must be refused up front
// (today the case expansion dereferences the missing impl).
TEST_CASE("an unknown impl in the spec defaults exits 2", "[cli][bad-input]") {
  const std::string path = data_dir + "spec_unknown_default_impl.json";
  check_bad_input(
      {"unknown default impl", "--spec " + quote(path), {path, "$.defaults.impls", "cpu-nope"}});
}

// --repeats 0 is read as "not given" today, so the sweep silently runs with the spec's repeats.
TEST_CASE("a zero repeat count on the command line exits 2", "[cli][bad-input]") {
  check_bad_input(
      {"zero repeats",
       "--repeats 0 --op matmul --backend cpu --batch 1 --layout alone --dtype fp32 --pass forward",
       {"command line", "--repeats", "at least 2"}});
}
