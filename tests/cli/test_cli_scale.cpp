// Triage and scale-out through the binary: `minimize` shrinks a drifting control to a smaller case
// that still drifts (and its printed replay command shows the drift), `sweep --devices` equals the
// unsharded sweep and forwards signals, and the Slurm script's shard and merge modes give the
// unsharded report.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

std::int64_t case_size(const json& c) {
  std::int64_t size =
      c["rows"].get<std::int64_t>() * static_cast<std::int64_t>(c["layouts"].size());
  for (const auto& [name, extent] : c["dims"].items()) size *= extent.get<std::int64_t>();
  return size;
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  std::size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return "";
  at += 1 + prefix.size();
  return text.substr(at, text.find('\n', at) - at);
}

bool no_temporary_left(const std::string& directory) {
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().filename().string().find(".bitcheck-devices-") == 0) return false;
  }
  return true;
}

int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const std::string small_sweep =
    "sweep --op matmul,rmsnorm --backend cpu --batch 1,3,7 --no-progress";

}  // namespace

TEST_CASE("minimize shrinks a drifting split-K control and its replay command still drifts",
          "[cli][minimize]") {
  TempDir dir;
  REQUIRE(
      run_bitcheck(
          dir,
          "sweep --op matmul --impl cpu-split-k-by-rows --backend cpu --dtype bf16 --pass forward "
          "--batch 1000 --no-progress --out " +
              quote(dir.path()))
          .exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  json original;
  for (const auto& c : report["results"]) {
    if (c["verdict"] == "drift") original = c;
  }
  REQUIRE(original.is_object());
  REQUIRE(original["rows"] == 1000);

  Run minimize = run_bitcheck(dir, "minimize " + quote(dir / "report.json") + " --case " +
                                       quote(original["id"].get<std::string>()) + " --out " +
                                       quote(dir / "min/minimized.json"));
  INFO("stdout: " << minimize.out << "\nstderr: " << minimize.err);
  REQUIRE(minimize.exit_code == 0);
  CHECK_THAT(minimize.out, Catch::Contains("step 1: "));
  json minimized = json::parse(read_file(dir / "min/minimized.json"));
  REQUIRE(minimized["results"].size() == 1);
  const json& smallest = minimized["results"][0];
  CHECK(smallest["verdict"] == "drift");
  CHECK(smallest["impl"] == original["impl"]);
  CHECK(smallest["seed"] == original["seed"]);
  CHECK(smallest["rows"].get<std::int64_t>() < 1000);
  CHECK(smallest["layouts"].size() < original["layouts"].size());
  CHECK(case_size(smallest) < case_size(original));
  for (const auto& [name, extent] : smallest["dims"].items())
    CHECK(extent <= original["dims"][name]);
  CHECK(minimized["meta"]["minimized_from"]["case"] == original["id"]);
  CHECK(minimized["meta"]["minimized_from"]["trials"].get<int>() <= 200);
  CHECK(line_starting(minimize.out, "minimized: ") == smallest["id"].get<std::string>());

  const std::string replay = line_starting(minimize.out, "replay: ");
  REQUIRE(replay.rfind(binary + " repro ", 0) == 0);
  CHECK(run_shell(replay + " > " + quote(dir / "replay.out") + " 2>&1") == 0);
  std::string replayed = read_file(dir / "replay.out");
  INFO("replay: " << replay << "\n" << replayed);
  CHECK_THAT(replayed,
             Catch::Contains("verdict: drift (report: drift)") && Catch::Contains("-> same bits"));
}

TEST_CASE("minimize keeps the original when nothing smaller drifts within the trial budget",
          "[cli][minimize]") {
  TempDir dir;
  REQUIRE(
      run_bitcheck(
          dir,
          "sweep --op matmul --impl cpu-split-k-by-rows --backend cpu --dtype bf16 --pass forward "
          "--batch 1000 --no-progress --out " +
              quote(dir.path()))
          .exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  const json& original = report["results"][0];
  REQUIRE(original["verdict"] == "drift");
  Run minimize = run_bitcheck(dir, "minimize " + quote(dir / "report.json") + " --case " +
                                       quote(original["id"].get<std::string>()) +
                                       " --max-trials 1 --out " + quote(dir / "m.json"));
  REQUIRE(minimize.exit_code == 0);
  json minimized = json::parse(read_file(dir / "m.json"));
  CHECK(minimized["meta"]["minimized_from"]["trials"] == 1);
  CHECK(minimized["meta"]["minimized_from"]["budget_exhausted"] == true);
  CHECK(minimized["results"][0]["verdict"] == "drift");
  CHECK_THAT(minimize.out, Catch::Contains("trial budget exhausted"));
}

TEST_CASE("minimize refuses a case that does not drift, and an unknown case",
          "[cli][minimize][bad-input]") {
  TempDir dir;
  REQUIRE(run_bitcheck(
              dir,
              "sweep --op matmul --impl cpu-fixed-order --backend cpu --dtype bf16 --pass forward "
              "--batch 7 --no-progress --out " +
                  quote(dir.path()))
              .exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  const std::string passing = report["results"][0]["id"];
  Run pass = run_bitcheck(dir, "minimize " + quote(dir / "report.json") + " --case " +
                                   quote(passing) + " --out " + quote(dir / "m.json"));
  CHECK(pass.exit_code == 2);
  CHECK_THAT(pass.err, Catch::Contains(dir / "report.json") &&
                           Catch::Contains("$.results[0].verdict") &&
                           Catch::Contains("drift or nondeterministic"));
  CHECK_FALSE(std::filesystem::exists(dir / "m.json"));
  Run unknown = run_bitcheck(dir, "minimize " + quote(dir / "report.json") + " --case nope");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("$.results[*].id"));
  Run no_trials = run_bitcheck(dir, "minimize " + quote(dir / "report.json") + " --case " +
                                        quote(passing) + " --max-trials 0");
  CHECK(no_trials.exit_code == 2);
  CHECK_THAT(no_trials.err, Catch::Contains("--max-trials"));
}

TEST_CASE("sweep --devices gives the unsharded sweep's cases, verdicts and fingerprints",
          "[cli][devices]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, small_sweep + " --out " + quote(dir.path())).exit_code == 0);
  Run devices = run_bitcheck(
      dir, small_sweep + " --devices 0,1 --report-name devices.json --out " + quote(dir.path()));
  INFO("stdout: " << devices.out << "\nstderr: " << devices.err);
  REQUIRE(devices.exit_code == 0);
  json whole = json::parse(read_file(dir / "report.json"));
  json sharded = json::parse(read_file(dir / "devices.json"));
  CHECK(results_without_timings(sharded) == results_without_timings(whole));
  CHECK(sharded["summary"] == whole["summary"]);
  CHECK(sharded["status_matrix"] == whole["status_matrix"]);
  CHECK(sharded["meta"]["devices"] == json({"0", "1"}));
  CHECK(sharded["meta"]["shards"].size() == 2);
  CHECK(sharded["meta"]["interrupted"] == false);
  CHECK_THAT(sharded["meta"]["command_line"].get<std::string>(), Catch::Contains("--devices 0,1"));
  CHECK_THAT(devices.out, Catch::Contains("2 shards on devices 0,1"));
  CHECK(no_temporary_left(dir.path()));
}

TEST_CASE("shards sharing a queue run every case once: units go to whoever asks first",
          "[cli][devices][queue]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, small_sweep + " --out " + quote(dir.path())).exit_code == 0);
  const std::string queue = dir / "queue";
  {
    std::ofstream counter(queue, std::ios::binary);
    const std::int64_t zero = 0;
    counter.write(reinterpret_cast<const char*>(&zero), sizeof zero);
  }
  // One after the other: the first shard drains the queue, the second finds it empty.
  Run first = run_bitcheck(dir, small_sweep + " --shard 0/2 --shard-queue " + quote(queue) +
                                    " --report-name first.json --out " + quote(dir.path()));
  Run second = run_bitcheck(dir, small_sweep + " --shard 1/2 --shard-queue " + quote(queue) +
                                     " --report-name second.json --out " + quote(dir.path()));
  INFO("first: " << first.out << first.err << "\nsecond: " << second.out << second.err);
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  json whole = json::parse(read_file(dir / "report.json"));
  json drained = json::parse(read_file(dir / "first.json"));
  json empty = json::parse(read_file(dir / "second.json"));
  CHECK(empty["results"].empty());
  CHECK_THAT(second.out, Catch::Contains("0 cases in 0 units from the shared queue"));
  REQUIRE(drained["results"].size() == whole["results"].size());
  // Claimed most expensive unit first, so not in spec order; the same cases and bits.
  std::map<std::string, std::string> by_id;
  for (const auto& c : whole["results"])
    by_id[c.at("id").get<std::string>()] = c.value("fingerprint", "");
  for (const auto& c : drained["results"]) {
    INFO(c.at("id"));
    REQUIRE(by_id.count(c.at("id").get<std::string>()) == 1);
    CHECK(by_id.at(c.at("id").get<std::string>()) == c.value("fingerprint", ""));
  }
  CHECK(drained["results"].front()["id"] != whole["results"].front()["id"]);
}

TEST_CASE("each case reports its host memory peak and the summary names the largest",
          "[cli][scale]") {
  TempDir dir;
  Run run = run_bitcheck(dir, small_sweep + " --out " + quote(dir.path()));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const json report = json::parse(read_file(dir / "report.json"));
  check_report_valid(dir / "report.json", report);
  if (!std::ifstream("/proc/self/clear_refs")) {
    WARN("no /proc/self/clear_refs: the peak is not measured here");
    return;
  }
  double largest = 0;
  int measured = 0;
  for (const auto& c : report["results"]) {
    if (c["verdict"] == "skipped") continue;  // a skipped case has no timings
    INFO(c["id"]);
    ++measured;
    const double peak = c.at("timings").value("host_peak_bytes", 0.0);
    CHECK(peak > 1e6);  // a process holds more than a megabyte
    largest = std::max(largest, peak);
  }
  CHECK(measured > 100);
  CHECK_THAT(run.out, Catch::Contains("host memory: peak"));
  CHECK(largest < 64e9);  // bytes, not kilobytes
}

TEST_CASE("sweep --devices refuses bad input before starting a shard",
          "[cli][devices][bad-input]") {
  TempDir dir;
  const std::string out = dir / "out";
  Run with_shard =
      run_bitcheck(dir, small_sweep + " --devices 0,1 --shard 0/2 --out " + quote(out));
  CHECK(with_shard.exit_code == 2);
  CHECK_THAT(with_shard.err, Catch::Contains("--devices") && Catch::Contains("--shard"));
  Run bad_op = run_bitcheck(dir, "sweep --op nope --devices 0,1 --no-progress --out " + quote(out));
  CHECK(bad_op.exit_code == 2);
  CHECK_THAT(bad_op.err, Catch::Contains("--op"));
  Run bad_device = run_bitcheck(dir, small_sweep + " --devices '0,a b' --out " + quote(out));
  CHECK(bad_device.exit_code == 2);
  CHECK_THAT(bad_device.err, Catch::Contains("--devices") && Catch::Contains("a b"));
  Run no_shard = run_bitcheck(
      dir, small_sweep + " --shard-queue " + quote(dir / "q") + " --out " + quote(out));
  CHECK(no_shard.exit_code == 2);
  CHECK_THAT(no_shard.err, Catch::Contains("--shard-queue") && Catch::Contains("--shard i/n"));
  Run no_queue = run_bitcheck(dir, small_sweep + " --shard 0/2 --shard-queue " +
                                       quote(dir / "missing") + " --out " + quote(out));
  CHECK(no_queue.exit_code == 2);
  CHECK_THAT(no_queue.err, Catch::Contains("--shard-queue") && Catch::Contains("missing"));
  CHECK_FALSE(std::filesystem::exists(out + "/report.json"));
}

TEST_CASE(
    "a signal to sweep --devices reaches the shards and leaves a partial report marked interrupted",
    "[cli][devices][interrupt]") {
  TempDir dir;
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    execl(binary.c_str(), binary.c_str(), "sweep", "--op", "all", "--backend", "cpu", "--devices",
          "0,1", "--no-progress", "--out", dir.path().c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  json report = json::parse(read_file(dir / "report.json"));
  check_report_valid(dir / "report.json", report);
  CHECK(report["meta"]["interrupted"] == true);
  CHECK(report["results"].size() > 0);
  CHECK(report["summary"]["cases"] == report["results"].size());
  CHECK_FALSE(report["meta"].contains("missing_shards"));  // both shards stopped cleanly
  CHECK(no_temporary_left(dir.path()));
}

TEST_CASE("the Slurm script's shard and merge modes give the unsharded report", "[cli][slurm]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, small_sweep + " --out " + quote(dir.path())).exit_code == 0);
  const std::string script = quote(source_dir + "/scripts/slurm-sweep.sh");
  const std::string out = dir / "slurm";
  const std::string sweep_args = " --op matmul,rmsnorm --backend cpu --batch 1,3,7";
  for (int task = 0; task < 3; ++task) {
    INFO("array task " << task);
    CHECK(run_shell("SLURM_ARRAY_TASK_ID=" + std::to_string(task) + " SLURM_ARRAY_TASK_COUNT=3 " +
                    script + " " + quote(binary) + " " + quote(out) + sweep_args + " > " +
                    quote(dir / "task.log") + " 2>&1") == 0);
  }
  REQUIRE(run_shell(script + " --merge " + quote(binary) + " " + quote(out) + " > " +
                    quote(dir / "merge.log") + " 2>&1") == 0);
  check_reports_in(dir.path());
  json whole = json::parse(read_file(dir / "report.json"));
  json merged = json::parse(read_file(out + "/report.json"));
  CHECK(results_without_timings(merged) == results_without_timings(whole));
  CHECK(merged["summary"] == whole["summary"]);
  CHECK(merged["status_matrix"] == whole["status_matrix"]);
  CHECK(merged["meta"]["shards"].size() == 3);
  for (const char* file : {"/matrix.md", "/matrix.html", "/junit.xml"}) {
    INFO(file);
    CHECK(std::filesystem::file_size(out + file) > 0);
  }

  // A shard that wrote no report: the merge refuses with exit 3 and names it.
  const std::string partial = dir / "partial";
  std::filesystem::create_directories(partial);
  for (const char* file : {"/shards.count", "/shard-0-of-3.json", "/shard-2-of-3.json"}) {
    std::filesystem::copy_file(out + file, partial + file);
  }
  CHECK(run_shell(script + " --merge " + quote(binary) + " " + quote(partial) + " > " +
                  quote(dir / "partial.log") + " 2>&1") == 3);
  CHECK_THAT(read_file(dir / "partial.log"), Catch::Contains("shard 1/3 wrote no report"));
  CHECK_FALSE(std::filesystem::exists(partial + "/report.json"));
}

TEST_CASE(
    "sweep --skip-done runs only what an earlier report lacks - merged, it equals one whole sweep",
    "[cli][resume]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, small_sweep + " --out " + quote(dir.path())).exit_code == 0);
  // The first part: the whole sweep's report cut after a third of its cases, as an interrupted
  // run leaves it.
  json part = json::parse(read_file(dir / "report.json"));
  const std::size_t kept = part["results"].size() / 3;
  part["results"].erase(part["results"].begin() + static_cast<std::ptrdiff_t>(kept),
                        part["results"].end());
  part["meta"]["interrupted"] = true;
  std::ofstream(dir / "part.json") << part.dump();
  Run rest = run_bitcheck(dir, small_sweep + " --skip-done " + quote(dir / "part.json") +
                                   " --report-name rest.json --out " + quote(dir.path()));
  INFO("stdout: " << rest.out << "\nstderr: " << rest.err);
  REQUIRE(rest.exit_code == 0);
  json rest_report = json::parse(read_file(dir / "rest.json"));
  std::set<std::string> part_ids;
  for (const auto& c : part["results"]) part_ids.insert(c["id"].get<std::string>());
  REQUIRE_FALSE(part_ids.empty());
  REQUIRE_FALSE(rest_report["results"].empty());
  for (const auto& c : rest_report["results"])
    CHECK(part_ids.count(c["id"].get<std::string>()) == 0);
  // --devices hands --skip-done on to its shards: the same cases as the single run.
  Run spread =
      run_bitcheck(dir, small_sweep + " --devices 0,1 --skip-done " + quote(dir / "part.json") +
                            " --report-name spread.json --out " + quote(dir.path()));
  REQUIRE(spread.exit_code == 0);
  CHECK(results_without_timings(json::parse(read_file(dir / "spread.json"))) ==
        results_without_timings(rest_report));
  Run merged = run_bitcheck(dir, "merge --out " + quote(dir / "merged.json") + " " +
                                     quote(dir / "part.json") + " " + quote(dir / "rest.json"));
  REQUIRE(merged.exit_code == 0);
  json whole = json::parse(read_file(dir / "report.json"));
  json joined = json::parse(read_file(dir / "merged.json"));
  CHECK(results_without_timings(joined) == results_without_timings(whole));
  CHECK(joined["summary"] == whole["summary"]);
  // A report that is not one is bad input, named.
  std::ofstream(dir / "bad.json") << "{\"results\": 3}";
  Run bad = run_bitcheck(
      dir, small_sweep + " --skip-done " + quote(dir / "bad.json") + " --out " + quote(dir / "x"));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("bad.json") && Catch::Contains("$.results"));
}

TEST_CASE("sweep --costs: an earlier report's case times order the work, the results are the same",
          "[cli][shard]") {
  TempDir dir;
  REQUIRE(run_bitcheck(dir, small_sweep + " --out " + quote(dir.path())).exit_code == 0);
  json report = json::parse(read_file(dir / "report.json"));
  Run costed =
      run_bitcheck(dir, small_sweep + " --devices 0,1 --costs " + quote(dir / "report.json") +
                            " --report-name costed.json --out " + quote(dir.path()));
  INFO("stdout: " << costed.out << "\nstderr: " << costed.err);
  REQUIRE(costed.exit_code == 0);
  CHECK(results_without_timings(json::parse(read_file(dir / "costed.json"))) ==
        results_without_timings(report));
  // A case time that is not a number of seconds is bad input, named; nothing is written.
  report["results"][1]["timings"]["total_seconds"] = "slow";
  report.erase("tool");  // not a report the suite's schema check should read
  std::ofstream(dir / "bad.json") << report.dump();
  Run bad = run_bitcheck(
      dir, small_sweep + " --costs " + quote(dir / "bad.json") + " --out " + quote(dir / "x"));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("bad.json") &&
                          Catch::Contains("results[1].timings.total_seconds") &&
                          Catch::Contains("seconds >= 0"));
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(dir / "x") / "report.json"));
}

TEST_CASE("a shard leaves the lost-sight judgement to the merged report, which still makes it",
          "[cli][shard]") {
  TempDir dir;
  // With alone as its only layout the split-K control has nothing to be compared with: it cannot
  // drift, though its batch reaches its switch (4 rows). (At M = 1 it would have had no chance.)
  const std::string blind =
      "sweep --op matmul --impl cpu-split-k-by-rows --backend cpu --batch 4 --layout alone "
      "--dtype fp32 --pass forward --no-progress --out " +
      quote(dir.path());
  Run whole = run_bitcheck(dir, blind + " --report-name whole.json");
  CHECK(whole.exit_code == 1);
  CHECK_THAT(whole.out, Catch::Contains("HARNESS FAILURE"));
  for (int shard = 0; shard < 2; ++shard) {
    Run part = run_bitcheck(dir, blind + " --shard " + std::to_string(shard) +
                                     "/2 --report-name part" + std::to_string(shard) + ".json");
    INFO("stdout: " << part.out);
    CHECK(part.exit_code == 0);
    CHECK_THAT(part.out, Catch::Contains("judged on the merged report"));
    json report = json::parse(read_file(dir / ("part" + std::to_string(shard) + ".json")));
    CHECK(report["summary"]["harness_failures"].empty());
  }
  Run merged = run_bitcheck(dir, "merge --out " + quote(dir / "merged.json") + " " +
                                     quote(dir / "part0.json") + " " + quote(dir / "part1.json"));
  CHECK(merged.exit_code == 1);
  CHECK_THAT(merged.out,
             Catch::Contains("HARNESS FAILURE") && Catch::Contains("cpu-split-k-by-rows"));
}
