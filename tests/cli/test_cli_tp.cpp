// Tensor parallelism through the binary on the CPU backend: TP sizes as a case dimension, the
// simulated collectives' orders (a ring drifts at 3 or more ranks, the fixed tree and the rank
// chain hold), bad TP sizes refused, and a group of rank processes (test-only ranks meeting through
// files) that records a crashed or hung rank's case as `error` and goes on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

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

// How many of a case's differences are against a layout at tp = 1 (drift or cross_tp_drift).
std::size_t tp_differences(const json& c) {
  std::size_t found = 0;
  for (const auto& list :
       {c.value("drift", json::array()), c.value("cross_tp_drift", json::array())})
    for (const auto& d : list)
      found += d["reference_layout"].get<std::string>().find("/tp=1") != std::string::npos;
  return found;
}

// Runs `spec` on the CPU backend (with `flags`) and returns its cases by id; the exit code must be
// `exit_code`.
std::map<std::string, json> sweep_cases(const TempDir& dir, const std::string& spec,
                                        const std::string& flags = "", int exit_code = 0) {
  write_spec(dir, "spec.json", spec);
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") + " " + flags +
                                  " --backend cpu --no-progress --out " + quote(dir / "out"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == exit_code);
  return by_id(json::parse(read_file(dir / "out/report.json")));
}

// The id of a case at `tp` (no suffix at tp = 1) of a bf16 sweep with seed 1.
std::string case_id(const std::string& op, const std::string& impl, const std::string& pass,
                    const std::string& dims, int rows, int tp, const std::string& suffix = "") {
  return op + "/" + impl + "/bf16/" + pass + "/" + dims + "/M=" + std::to_string(rows) + "/seed=1" +
         (tp > 1 ? "/tp=" + std::to_string(tp) : "") + suffix;
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

TEST_CASE(
    "a rank group smaller than the tp of a case skips that case with the reason, the rest run",
    "[cli][tp][isolation]") {
  TempDir dir;
  Environment enabled({"BITCHECK_TEST_IMPLS", "BITCHECK_TEST_RANKS"});
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2, 4], "batches": [2, 5]},
    "ops": {"all_reduce": {"shapes": [{"H": 64}], "impls": ["test-ranks-fixed-order"]}}})");
  // Two GPUs listed: a group of 2 ranks, which the tp = 4 cases must not wait on for ranks 2 and 3.
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --devices a,b --rank-case-timeout 10 --no-progress --out " +
                                  quote(dir / "out"));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  const auto cases = by_id(json::parse(read_file(dir / "out/report.json")));
  CHECK(cases.size() == 3 * 2);
  for (int rows : {2, 5}) {
    const std::string id =
        "all_reduce/test-ranks-fixed-order/bf16/forward/H=64/M=" + std::to_string(rows) + "/seed=1";
    CHECK(cases.at(id)["verdict"] == "pass");
    CHECK(cases.at(id + "/tp=2")["verdict"] == "pass");
    const json& four = cases.at(id + "/tp=4");
    CHECK(four["verdict"] == "skipped");
    CHECK(four["reason"].get<std::string>().find("tp=4 needs 4 ranks") != std::string::npos);
  }
}

TEST_CASE(
    "on 4 devices the tp = 2 cases run on two groups of 2 side by side, after the tp = 4 ones",
    "[cli][tp][isolation]") {
  TempDir dir;
  Environment enabled({"BITCHECK_TEST_IMPLS", "BITCHECK_TEST_RANKS"});
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2, 4], "batches": [2, 3, 5]},
    "ops": {"all_reduce": {"shapes": [{"H": 64}], "impls": ["test-ranks-fixed-order"]}}})");
  Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                  " --devices a,b,c,d --rank-case-timeout 10 --no-progress --out " +
                                  quote(dir / "out"));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  const json report = json::parse(read_file(dir / "out/report.json"));
  const auto cases = by_id(report);
  CHECK(cases.size() == 3 * 3);
  for (const auto& [id, entry] : cases) CHECK(entry["verdict"] == "pass");
  const json& teams = report["meta"]["rank_group"]["teams"];
  REQUIRE(teams.size() == 3);
  CHECK(teams[0]["group_size"] == 4);
  CHECK(teams[0]["devices"] == json::array({"a", "b", "c", "d"}));
  CHECK(teams[0]["cases"] == 3);
  CHECK(teams[1]["group_size"] == 2);
  CHECK(teams[1]["devices"] == json::array({"a", "b"}));
  CHECK(teams[2]["devices"] == json::array({"c", "d"}));
  CHECK(teams[1]["cases"].get<int>() + teams[2]["cases"].get<int>() == 3);
  CHECK(teams[2]["cases"].get<int>() >= 1);
  CHECK(report["meta"]["rank_group"]["groups_started"] == 3);
  CHECK(report["meta"]["rank_group"]["devices"] == json::array({"a", "b", "c", "d"}));
  // The merged report's sources: the rank group with its own wall time, then the shards.
  const json& sources = report["meta"]["shards"];
  REQUIRE(!sources.empty());
  CHECK(sources[0]["source"] == "rank group of 4");
  CHECK(sources[0]["wall_seconds"].get<double>() > 0);
  CHECK(sources[0]["wall_seconds"].get<double>() <= report["meta"]["wall_seconds"].get<double>());
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

TEST_CASE(
    "a signal during the rank group kills its ranks, starts no shard, and leaves the finished "
    "cases in a report marked interrupted",
    "[cli][tp][interrupt]") {
  TempDir dir;
  Environment enabled({"BITCHECK_TEST_IMPLS", "BITCHECK_TEST_RANKS"});
  // Two cases that finish at once, then one whose ranks hang (far below its 120 s case limit when
  // the signal comes); the tp = 1 cases belong to the shards, which run after the group.
  write_spec(dir, "spec.json", R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "passes": ["forward"], "tp": [1, 2]},
    "ops": {"all_reduce": {"shapes": [{"H": 64}], "batches": [2, 5],
                           "impls": ["test-ranks-fixed-order"]},
            "hang": {"op": "all_reduce", "shapes": [{"H": 64}], "batches": [7],
                     "impls": ["test-rank-hang"]}}})");
  const std::string spec = dir / "spec.json", out = dir / "out";
  const auto start = std::chrono::steady_clock::now();
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    execl(binary.c_str(), binary.c_str(), "sweep", "--spec", spec.c_str(), "--devices", "a,b",
          "--rank-case-timeout", "120", "--no-progress", "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(seconds < 60);  // the hung ranks were killed, not waited for
  const json report = json::parse(read_file(dir / "out/report.json"));
  check_report_valid(dir / "out/report.json", report);
  CHECK(report["meta"]["interrupted"] == true);
  CHECK(report["meta"]["rank_group"]["interrupted"] == true);
  CHECK(report["meta"]["rank_group"]["faults"].empty());
  const auto cases = by_id(report);
  CHECK(cases.size() == 2);  // the two finished cases, neither the hung one nor a shard's
  for (int rows : {2, 5}) {
    const std::string id =
        "all_reduce/test-ranks-fixed-order/bf16/forward/H=64/M=" + std::to_string(rows) +
        "/seed=1/tp=2";
    REQUIRE(cases.count(id) == 1);
    CHECK(cases.at(id).at("verdict") == "pass");
  }
  CHECK(report["summary"]["cases"] == report["results"].size());
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
  for (int tp : {2, 4}) {
    for (const std::string pass : {"forward", "backward"}) {
      // fixed-order: the same bits at every tp, forward and backward.
      const json fixed = at("cpu-tp-row-fixed-order", pass, 16, tp);
      CHECK(fixed["verdict"] == "pass");
      CHECK(tp_differences(fixed) == 0);
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

TEST_CASE(
    "vocab-parallel logprob, lm_head_logprob and lm_head on simulated ranks: fixed-order "
    "holds across TP sizes, the rank chain's cross-TP drift is recorded, the controls drift",
    "[cli][tp][vocab]") {
  TempDir dir;
  const auto cases = sweep_cases(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "tp": [1, 2, 4], "batches": [3, 33],
                 "impls": ["cpu-tp-vocab-fixed-order", "cpu-tp-vocab-rank-chain",
                           "cpu-tp-vocab-ring", "cpu-tp-vocab-early-rounding",
                           "cpu-tp-vocab-naive-pair"]},
    "ops": {"logprob": {"shapes": [{"V": 1024}]},
            "lm_head_logprob": {"shapes": [{"V": 512, "H": 64}]},
            "lm_head": {"shapes": [{"V": 512, "H": 64}]}}})");
  struct OpUnderTest {
    std::string op, dims;
    std::vector<std::string> control_passes;  // where the controls drift by construction
    std::vector<std::string> rank_local;      // the passes with no sum across the ranks
  };
  // logprob's backward sums across the ranks too, but the sum moves dlogits by a fraction of an
  // ulp that rounding mostly hides: its controls are not held to drift there.
  const std::vector<OpUnderTest> ops = {
      {"logprob", "V=1024", {"forward"}, {}},
      {"lm_head_logprob", "H=64,V=512", {"forward", "backward"}, {}},
      {"lm_head", "H=64,V=512", {"backward"}, {"forward"}}};
  auto among = [](const std::vector<std::string>& passes, const std::string& pass) {
    return std::find(passes.begin(), passes.end(), pass) != passes.end();
  };
  for (const auto& [op, dims, control_passes, rank_local] : ops) {
    auto at = [&, &op = op, &dims = dims](const std::string& order, const std::string& pass,
                                          int rows, int tp) {
      return cases.at(case_id(op, "cpu-tp-vocab-" + order, pass, dims, rows, tp));
    };
    for (const std::string pass : {"forward", "backward"}) {
      for (int tp : {1, 2, 4}) {
        for (int rows : {3, 33}) {
          INFO(op << " " << pass << " tp=" << tp << " M=" << rows);
          // fixed-order: the same bits in every layout at every tp as alone at tp = 1.
          const json fixed = at("fixed-order", pass, rows, tp);
          CHECK(fixed["verdict"] == "pass");
          CHECK(tp_differences(fixed) == 0);
          if (tp > 1) CHECK(fixed["layouts_run"][0] == "alone/tp=1");
          // The rank chain (NCCL's tree + Simple pinned) holds in the batch at every tp.
          CHECK(at("rank-chain", pass, rows, tp)["verdict"] == "pass");
        }
        if (tp == 1) continue;
        INFO(op << " " << pass << " tp=" << tp);
        // Across TP sizes the rank chain differs where a sum crosses the ranks: reported beside
        // the verdict, not a failure.
        CHECK(at("rank-chain", pass, 33, tp).contains("cross_tp_drift") != among(rank_local, pass));
        // The cross-TP controls drift by construction where they are built to; where nothing
        // crosses the ranks every order gives the same bits.
        for (const std::string control : {"early-rounding", "naive-pair"}) {
          const json c = at(control, pass, 33, tp);
          CHECK(c.value("expected_to_drift", false) == among(control_passes, pass));
          if (among(control_passes, pass)) CHECK(c["verdict"] == "drift");
          if (among(rank_local, pass)) CHECK(tp_differences(c) == 0);
        }
      }
      // The ring's order follows the message only at 3 or more ranks.
      if (among(control_passes, pass)) CHECK(at("ring", pass, 33, 4)["verdict"] == "drift");
      if (among(rank_local, pass)) CHECK(at("ring", pass, 33, 4)["verdict"] == "pass");
      CHECK_FALSE(at("ring", pass, 33, 2).value("expected_to_drift", false));
      CHECK(at("naive-pair", pass, 33, 1)["verdict"] == "pass");
    }
  }
}

TEST_CASE(
    "vocab-parallel embedding: fixed-order keeps the sign of a -0 at every tp, the masked "
    "sum of the rank chain turns it into +0 at tp > 1",
    "[cli][tp][vocab][special_values]") {
  const std::string spec = R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "tp": [1, 2, 4], "batches": [33]},
    "ops": {"embedding": {"shapes": [{"V": 512, "H": 64}],
            "impls": ["cpu-tp-vocab-fixed-order", "cpu-tp-vocab-rank-chain"]}}})";
  const std::string dims = "H=64,V=512";
  SECTION("with special values (-0 among them) in the table") {
    TempDir dir;
    const auto cases = sweep_cases(dir, spec, "--special-values");
    const std::string special = "/special=0.03125";
    for (int tp : {2, 4}) {
      INFO("tp=" << tp);
      for (const std::string pass : {"forward", "backward"}) {
        const json fixed =
            cases.at(case_id("embedding", "cpu-tp-vocab-fixed-order", pass, dims, 33, tp, special));
        CHECK(fixed["verdict"] == "pass");
        CHECK(tp_differences(fixed) == 0);
      }
      const json chain = cases.at(
          case_id("embedding", "cpu-tp-vocab-rank-chain", "forward", dims, 33, tp, special));
      CHECK(chain["verdict"] == "pass");  // the same bits in every batch at one tp
      REQUIRE(chain.contains("cross_tp_drift"));
      const json& mismatch = chain["cross_tp_drift"][0]["first_mismatch"];
      CHECK(mismatch["expected_bits"] == "0x8000");  // -0 alone at tp = 1
      CHECK(mismatch["actual_bits"] == "0x0000");    // +0 from the sum over the ranks
      // dtable is rank-local: no sum across the ranks, the same bits.
      CHECK(tp_differences(cases.at(case_id("embedding", "cpu-tp-vocab-rank-chain", "backward",
                                            dims, 33, tp, special))) == 0);
    }
  }
  SECTION("the control of that check: without special values the masked sum is exact") {
    TempDir dir;
    const auto cases = sweep_cases(dir, spec);
    for (int tp : {2, 4}) {
      const json chain =
          cases.at(case_id("embedding", "cpu-tp-vocab-rank-chain", "forward", dims, 33, tp));
      CHECK(chain["verdict"] == "pass");
      CHECK(tp_differences(chain) == 0);
    }
  }
}

TEST_CASE(
    "head-parallel attention on simulated ranks: no reduction across them, the same bits "
    "at every tp",
    "[cli][tp][attention]") {
  TempDir dir;
  const auto cases = sweep_cases(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "tp": [1, 2, 4], "batches": [3]},
    "ops": {"attention": {"impls": ["cpu-tp-heads-fixed-order"],
                          "layouts": ["seq_alone", "varlen_packed", "padded", "chunked_16", "decode"],
                          "shapes": [{"H": 8, "KVH": 4, "D": 16, "L": 40}]}}})");
  for (const std::string pass : {"forward", "backward"}) {
    for (int tp : {1, 2, 4}) {
      INFO(pass << " tp=" << tp);
      const json c = cases.at(
          case_id("attention", "cpu-tp-heads-fixed-order", pass, "D=16,H=8,KVH=4,L=40", 3, tp));
      CHECK(c["verdict"] == "pass");
      CHECK(tp_differences(c) == 0);
      if (tp > 1) CHECK(c["layouts_run"][0] == "seq_alone/tp=1");
    }
  }
}

TEST_CASE(
    "a TP size that does not divide V or the heads is bad input naming the file and the field",
    "[cli][tp]") {
  TempDir dir;
  auto refused = [&](const std::string& spec, const std::string& field, const std::string& why) {
    write_spec(dir, "spec.json", spec);
    Run run = run_bitcheck(dir, "sweep --spec " + quote(dir / "spec.json") +
                                    " --backend cpu --no-progress --out " + quote(dir / "out"));
    INFO(run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("spec.json") != std::string::npos);
    CHECK(run.err.find(field) != std::string::npos);
    CHECK(run.err.find(why) != std::string::npos);
  };
  refused(R"({"schema_version": 1, "ops": {"logprob": {"shapes": [{"V": 36}], "tp": [1, 8],
             "impls": ["cpu-tp-vocab-fixed-order"]}}})",
          "$.ops.logprob.tp", "tp=8 does not divide V=36");
  refused(R"({"schema_version": 1, "defaults": {"tp": [1, 4]},
             "ops": {"embedding": {"shapes": [{"V": 510, "H": 8}]}}})",
          "$.defaults.tp", "tp=4 does not divide V=510");
  refused(R"({"schema_version": 1, "ops": {"attention": {"shapes": [{"H": 8, "KVH": 2, "D": 16,
             "L": 8}], "tp": [1, 4], "impls": ["cpu-tp-heads-fixed-order"]}}})",
          "$.ops.attention.tp", "tp=4 does not divide KVH=2");
}
