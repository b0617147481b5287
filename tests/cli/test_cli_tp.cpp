// Tensor parallelism through the binary on the CPU backend: TP sizes as a case dimension, the
// simulated collectives' orders (a ring drifts at 3 or more ranks, the fixed tree and the rank
// chain hold), bad TP sizes refused, and a group of rank processes (test-only ranks meeting through
// files) that records a crashed or hung rank's case as `error` and goes on.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"

using nlohmann::json;

namespace {

std::map<std::string, json> by_id(const json& report) {
  std::map<std::string, json> cases;
  for (const auto& c : report["results"]) cases[c["id"].get<std::string>()] = c;
  return cases;
}

// Sets environment variables for the commands run while it lives.
class Environment {
 public:
  explicit Environment(std::vector<std::string> names) : names_(std::move(names)) {
    for (const auto& name : names_) setenv(name.c_str(), "1", 1);
  }
  ~Environment() {
    for (const auto& name : names_) unsetenv(name.c_str());
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

 private:
  std::vector<std::string> names_;
};

void write_spec(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
}

}  // namespace

TEST_CASE("all_reduce at tp 1, 2 and 4: the ring drifts only at 4 ranks, the fixed orders hold",
          "[cli][tp]") {
  TempDir dir;
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2, 4], "batches": [1, 3, 16]},
    "ops": {"all_reduce": {"shapes": [{"H": 256}]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const json report = json::parse(read_file(dir / "out/report.json"));
  const auto cases = by_id(report);
  const std::string base = "all_reduce/IMPL/bf16/forward/H=256/M=16/seed=1";
  auto verdict = [&](const std::string& impl, const std::string& tp) {
    std::string id = base;
    id.replace(id.find("IMPL"), 4, impl);
    return cases.at(id + tp)["verdict"].get<std::string>();
  };
  CHECK(verdict("cpu-fixed-order", "") == "pass");
  CHECK(verdict("cpu-fixed-order", "/tp=4") == "pass");
  CHECK(verdict("cpu-rank-chain", "/tp=4") == "pass");
  CHECK(verdict("cpu-ring", "/tp=2") == "pass");  // a sum of two values is commutative
  CHECK(verdict("cpu-ring", "/tp=4") == "drift");
  CHECK(verdict("cpu-rotating-chain", "/tp=4") == "drift");
  CHECK(cases.at(base.substr(0, base.find("IMPL")) + "cpu-ring/bf16/forward/H=256/M=16/seed=1/tp=4")
            .value("tp", 0) == 4);
  // The matrix has a row per TP size.
  const auto& ops = report["status_matrix"]["ops"];
  CHECK(std::find(ops.begin(), ops.end(), "all_reduce tp=4") != ops.end());
  // A control at tp 2 is not expected to drift, at tp 4 it is.
  CHECK_FALSE(cases.at("all_reduce/cpu-ring/bf16/forward/H=256/M=16/seed=1/tp=2")
                  .value("expected_to_drift", true));
  CHECK(cases.at("all_reduce/cpu-ring/bf16/forward/H=256/M=16/seed=1/tp=4")
            .value("expected_to_drift", false));
}

TEST_CASE("a TP size that is not 1, 2, 4 or 8 is bad input naming the file and the field",
          "[cli][tp]") {
  TempDir dir;
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "ops": {"all_reduce": {"shapes": [{"H": 256}], "tp": [1, 3]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("spec.json") != std::string::npos);
  CHECK(run.err.find("$.ops.all_reduce.tp[1]") != std::string::npos);
  CHECK(run.err.find("1, 2, 4 or 8") != std::string::npos);
  Run flag =
      run_bitcheck(dir, "sweep --op all_reduce --tp 5 --backend cpu --out " + quote(dir / "out"));
  CHECK(flag.exit_code == 2);
  CHECK(flag.err.find("--tp") != std::string::npos);
}

TEST_CASE("a rank group: a crashed or hung rank makes its case error, and the sweep goes on",
          "[cli][tp][isolation]") {
  TempDir dir;
  Environment enabled({"BITCHECK_TEST_IMPLS", "BITCHECK_TEST_RANKS"});
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2, 4], "batches": [2, 5]},
    "ops": {"all_reduce": {"shapes": [{"H": 64}],
      "impls": ["test-ranks-fixed-order", "test-rank-crash", "test-rank-hang"]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --devices a,b,c,d --rank-case-timeout 4 --no-progress --out " +
                                  quote(dir / "out"));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 3);  // the faulted cases are errors
  const json report = json::parse(read_file(dir / "out/report.json"));
  const auto cases = by_id(report);
  CHECK(cases.size() == 3 * 3 * 2);  // every case is in the report
  auto verdict = [&](const std::string& impl, int rows, const std::string& tp) {
    return cases
        .at("all_reduce/" + impl + "/bf16/forward/H=64/M=" + std::to_string(rows) + "/seed=1" + tp)
        .at("verdict")
        .get<std::string>();
  };
  for (int rows : {2, 5}) {
    for (const std::string tp : {"", "/tp=2", "/tp=4"}) {
      CHECK(verdict("test-ranks-fixed-order", rows, tp) == "pass");
      CHECK(verdict("test-rank-crash", rows, tp) == (tp.empty() ? "pass" : "error"));
      CHECK(verdict("test-rank-hang", rows, tp) == (tp.empty() ? "pass" : "error"));
    }
  }
  const json& crashed = cases.at("all_reduce/test-rank-crash/bf16/forward/H=64/M=2/seed=1/tp=2");
  CHECK(crashed["reason"].get<std::string>().find("rank 1") != std::string::npos);
  CHECK(crashed["reason"].get<std::string>().find("signal 11") != std::string::npos);
  const json& hung = cases.at("all_reduce/test-rank-hang/bf16/forward/H=64/M=2/seed=1/tp=4");
  CHECK(hung["reason"].get<std::string>().find("no rank of the group finished") !=
        std::string::npos);
  CHECK(report["meta"]["rank_group"]["size"] == 4);
  CHECK(report["meta"]["rank_group"]["faults"].size() == 8);
}

TEST_CASE("TP matmul on simulated ranks: fixed-order holds across TP sizes, the controls drift",
          "[cli][tp]") {
  TempDir dir;
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "tp": [1, 2, 4], "batches": [3, 16]},
    "ops": {"matmul": {"shapes": [{"N": 32, "K": 256}], "impls": [
      "cpu-tp-row-fixed-order", "cpu-tp-row-rank-chain", "cpu-tp-row-ring",
      "cpu-tp-row-early-rounding", "cpu-tp-row-naive-pair", "cpu-tp-column-fixed-order",
      "cpu-tp-column-naive-pair"]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto cases = by_id(json::parse(read_file(dir / "out/report.json")));
  auto at = [&](const std::string& impl, const std::string& pass, int rows, int tp) {
    return cases.at("matmul/" + impl + "/bf16/" + pass + "/K=256,N=32/M=" + std::to_string(rows) +
                    "/seed=1" + (tp > 1 ? "/tp=" + std::to_string(tp) : ""));
  };
  auto across_tp = [](const json& c) {
    std::size_t found = 0;
    for (const auto& list :
         {c.value("drift", json::array()), c.value("cross_tp_drift", json::array())})
      for (const auto& d : list)
        found += d["reference_layout"].get<std::string>().find("/tp=1") != std::string::npos;
    return found;
  };
  for (int tp : {2, 4}) {
    for (const std::string pass : {"forward", "backward"}) {
      // fixed-order: the same bits at every tp, forward and backward.
      const json fixed = at("cpu-tp-row-fixed-order", pass, 16, tp);
      CHECK(fixed["verdict"] == "pass");
      CHECK(across_tp(fixed) == 0);
      CHECK(fixed["layouts_run"][0] == "alone/tp=1");
      CHECK(at("cpu-tp-column-fixed-order", pass, 16, tp)["verdict"] == "pass");
    }
    // The rank chain holds in the batch; across TP sizes it differs, reported beside the verdict.
    const json chain = at("cpu-tp-row-rank-chain", "forward", 16, tp);
    CHECK(chain["verdict"] == "pass");
    CHECK(chain.contains("cross_tp_drift"));
    // The cross-TP controls drift in the pass whose sum crosses the ranks.
    CHECK(at("cpu-tp-row-naive-pair", "forward", 16, tp)["verdict"] == "drift");
    CHECK(at("cpu-tp-row-early-rounding", "forward", 16, tp)["verdict"] == "drift");
    CHECK(at("cpu-tp-column-naive-pair", "backward", 16, tp)["verdict"] == "drift");
    CHECK(at("cpu-tp-column-naive-pair", "forward", 16, tp)["verdict"] == "pass");
  }
  CHECK(at("cpu-tp-row-ring", "forward", 16, 4)["verdict"] == "drift");
  CHECK(at("cpu-tp-row-naive-pair", "forward", 16, 1)["verdict"] == "pass");
}

TEST_CASE("a TP size that does not divide a split dim is bad input naming the file and the field",
          "[cli][tp]") {
  TempDir dir;
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "ops": {"matmul": {"shapes": [{"N": 32, "K": 36}], "tp": [1, 8],
                       "impls": ["cpu-tp-row-fixed-order"]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("spec.json") != std::string::npos);
  CHECK(run.err.find("$.ops.matmul.tp") != std::string::npos);
  CHECK(run.err.find("tp=8 does not divide K=36") != std::string::npos);
}

TEST_CASE(
    "a rank group under srun is one step whose tasks take their rank from Slurm, and a crashed "
    "task "
    "is its case's error",
    "[cli][tp][slurm]") {
  TempDir dir;
  Environment enabled({"BITCHECK_TEST_IMPLS", "BITCHECK_TEST_RANKS"});
  // A stand-in for srun: --ntasks=N tasks of the command, each with Slurm's task variables; it
  // fails when a task fails, as srun --kill-on-bad-exit does.
  std::filesystem::create_directories(dir / "bin");
  std::ofstream(dir / "bin/srun") << R"(#!/usr/bin/env bash
tasks=1
while [ $# -gt 0 ]; do
  case "$1" in --ntasks=*) tasks=${1#--ntasks=}; shift ;; --*) shift ;; *) break ;; esac
done
echo "srun: $tasks tasks" >&2
pids=()
for ((t = 0; t < tasks; t++)); do
  SLURM_PROCID=$t SLURM_NTASKS=$tasks SLURM_LOCALID=$t "$@" > "$BITCHECK_SRUN_LOGS/task-$t.log" 2>&1 &
  pids+=($!)
done
status=0
for ((t = 0; t < tasks; t++)); do
  wait -n || { status=1; kill "${pids[@]}" 2> /dev/null; break; }
done
wait
exit $status
)";
  std::filesystem::permissions(dir / "bin/srun", std::filesystem::perms::owner_all);
  std::filesystem::create_directories(dir / "logs");
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2, 4], "batches": [2, 5]},
    "ops": {"all_reduce": {"shapes": [{"H": 64}],
      "impls": ["test-ranks-fixed-order", "test-rank-crash"]}}})");
  const std::string environment = "PATH=" + quote(dir / "bin") + ":\"$PATH\" SLURM_NTASKS=4 " +
                                  "BITCHECK_SRUN_LOGS=" + quote(dir / "logs") + " ";
  Run run = run_command(
      dir, environment + quote(binary) + " sweep --spec " + quote(dir / "spec.json") +
               " --devices 0 --rank-launcher srun --rank-case-timeout 30 --no-progress --out " +
               quote(dir / "out"));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 3);  // the crashed task's cases are errors
  const json report = json::parse(read_file(dir / "out/report.json"));
  const auto cases = by_id(report);
  CHECK(cases.size() == 2 * 3 * 2);
  for (int rows : {2, 5}) {
    for (const std::string tp : {"/tp=2", "/tp=4"}) {
      const std::string id = "/bf16/forward/H=64/M=" + std::to_string(rows) + "/seed=1" + tp;
      CHECK(cases.at("all_reduce/test-ranks-fixed-order" + id)["verdict"] == "pass");
      CHECK(cases.at("all_reduce/test-rank-crash" + id)["verdict"] == "error");
    }
  }
  CHECK(report["meta"]["rank_group"]["size"] == 4);
  // The tasks ran as ranks 0-3 of the step (rank 1 is the one the crash impl kills).
  CHECK(read_file(dir / "logs/task-3.log").find("rank 3 [") != std::string::npos);
}
