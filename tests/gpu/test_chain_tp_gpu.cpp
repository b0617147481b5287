// The chain and the vocabulary-parallel logprob at tp = P on a host of several GPUs (one rank
// process per GPU, NCCL), through the bitcheck binary: tp-fixed-order gives a token's tp = 1 bits
// at every tp, forward and backward; the tp-early-rounding control drifts at tp > 1, first at
// l0.o_proj; the naive TP pair drifts across TP sizes in logprob's forward, one fp32 value a row
// (on 4 x H100 its shares' tree sums once held to the bits in every case). Hidden ([.multi-gpu]):
// run it on a host of 2 or more GPUs with NCCL found (BITCHECK_NCCL_LIBRARY or libnccl.so.2):
//   tests/bitcheck_gpu_tests "[multi-gpu]"
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

using nlohmann::json;

namespace {

// This binary's directory: bitcheck is in ../bin in a bundle and in ../apps in a build tree.
std::filesystem::path binary_directory() {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path();
}

std::string bitcheck_binary() {
  if (const char* chosen = std::getenv("BITCHECK_BINARY"); chosen && *chosen) return chosen;
  for (const char* relative : {"bin/bitcheck", "apps/bitcheck"}) {
    const std::filesystem::path path = binary_directory().parent_path() / relative;
    if (std::filesystem::exists(path)) return path.string();
  }
  return "bitcheck";
}

int visible_gpus() {
  FILE* pipe = popen("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null", "r");
  if (!pipe) return 0;
  int count = 0;
  char line[64];
  while (std::fgets(line, sizeof line, pipe)) ++count;
  pclose(pipe);
  return count;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The devices "0,1,..." of the largest tp (2 or 4) that `gpus` allow, and that tp.
std::pair<std::string, int> largest_group(int gpus) {
  const int largest_tp = gpus >= 4 ? 4 : 2;
  std::string devices = "0";
  for (int d = 1; d < largest_tp; ++d) devices += "," + std::to_string(d);
  return {devices, largest_tp};
}

// `bitcheck sweep` of `spec` at tp 1 up to `largest_tp` on `devices` (CUDA), in `dir`: its exit
// status and its log.
std::pair<int, std::string> sweep_at_tps(const std::filesystem::path& dir, const std::string& spec,
                                         const std::string& devices, int largest_tp) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "spec.json") << spec;
  const std::string command = bitcheck_binary() + " sweep --spec " + (dir / "spec.json").string() +
                              " --tp " + (largest_tp == 4 ? "1,2,4" : "1,2") +
                              " --backend cuda --devices " + devices + " --no-progress --out " +
                              (dir / "out").string() + " > " + (dir / "log.txt").string() + " 2>&1";
  const int status = std::system(command.c_str());
  return {status, command + "\n" + read_text(dir / "log.txt")};
}

}  // namespace

TEST_CASE("the chain on NCCL ranks: fixed-order holds at tp 2 and 4, early rounding drifts",
          "[tp][chain][.multi-gpu]") {
  const int gpus = visible_gpus();
  if (gpus < 2) {
    WARN("the chain at tp > 1 needs 2 or more GPUs; " << gpus << " visible");
    return;
  }
  const auto [devices, largest_tp] = largest_group(gpus);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bitcheck-chain-tp-" + std::to_string(getpid()));
  const auto [status, log] = sweep_at_tps(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "batches": [3]},
    "ops": {"chain": {"impls": ["tp-fixed-order", "tp-early-rounding"],
      "layouts": ["seq_alone", "batch", "varlen_packed", "padded"],
      "shapes": [{"layers": 1, "H": 256, "heads": 4, "kv_heads": 4, "D": 64, "I": 512,
                  "V": 4096, "L": 48}]}}})",
                                          devices, largest_tp);
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const json report = json::parse(read_text(dir / "out/report.json"));
  std::map<std::tuple<std::string, std::string, int>, json> cases;
  for (const auto& c : report["results"])
    cases[{c["impl"].get<std::string>(), c["pass"].get<std::string>(), c.value("tp", 1)}] = c;
  for (const std::string pass : {"forward", "backward"}) {
    for (int tp = 1; tp <= largest_tp; tp *= 2) {
      INFO(pass << " tp=" << tp);
      const json& fixed = cases.at({"tp-fixed-order", pass, tp});
      CHECK(fixed["verdict"] == "pass");
      CHECK(fixed.value("drift", json::array()).empty());
      if (tp == 1) continue;
      CHECK(fixed["layouts_run"][0] == "seq_alone/tp=1");
      const json& control = cases.at({"tp-early-rounding", pass, tp});
      CHECK(control["verdict"] == "drift");
      CHECK(control["chain"]["first_failing_forward"]["call"] == "l0.o_proj");
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "vocab-parallel logprob on NCCL ranks: the naive TP pair drifts across TP sizes in the "
    "forward, fixed-order holds",
    "[tp][vocab][.multi-gpu]") {
  const int gpus = visible_gpus();
  if (gpus < 2) {
    WARN("logprob at tp > 1 needs 2 or more GPUs; " << gpus << " visible");
    return;
  }
  const auto [devices, largest_tp] = largest_group(gpus);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bitcheck-vocab-tp-" + std::to_string(getpid()));
  // The quick TP spec's shapes; 16 rows, 8 of them alone: few values to show a drift in.
  const auto [status, log] = sweep_at_tps(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "batches": [16], "alone_rows": 8, "passes": ["forward"],
                 "impls": ["tp-vocab-fixed-order", "tp-vocab-naive-pair"]},
    "ops": {"logprob": {"shapes": [{"V": 32000}]},
            "lm_head_logprob": {"shapes": [{"V": 32000, "H": 1024}]}}})",
                                          devices, largest_tp);
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(log.find("HARNESS FAILURE") == std::string::npos);
  const json report = json::parse(read_text(dir / "out/report.json"));
  std::map<std::tuple<std::string, std::string, int>, json> cases;
  for (const auto& c : report["results"])
    cases[{c["op"].get<std::string>(), c["impl"].get<std::string>(), c.value("tp", 1)}] = c;
  for (const std::string op : {"logprob", "lm_head_logprob"}) {
    for (int tp = 1; tp <= largest_tp; tp *= 2) {
      INFO(op << " tp=" << tp);
      CHECK(cases.at({op, "tp-vocab-fixed-order", tp})["verdict"] == "pass");
      const json& naive = cases.at({op, "tp-vocab-naive-pair", tp});
      CHECK(naive["verdict"] == (tp == 1 ? "pass" : "drift"));
      CHECK(naive.value("expected_to_drift", false) == (tp > 1));
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "the TP matmuls' chunk tree over peer memory and over NCCL: the bits of tp = 1 on either "
    "transport",
    "[tp][matmul][.multi-gpu]") {
  const int gpus = visible_gpus();
  if (gpus < 2) {
    WARN("the TP matmuls at tp > 1 need 2 or more GPUs; " << gpus << " visible");
    return;
  }
  const auto [devices, largest_tp] = largest_group(gpus);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bitcheck-matmul-tp-" + std::to_string(getpid()));
  // 3 rows: 12 KiB of fp32 subtree (one shot; NCCL: gathered); 256 rows: 1 MiB (two shots;
  // NCCL: scattered); 1024 rows: 4 MiB (the GEMM sums the rank's subtree and stores it over peer
  // memory; NCCL: scattered).
  const auto [status, log] = sweep_at_tps(dir, R"({"schema_version": 1,
    "defaults": {"dtypes": ["bf16"], "batches": [3, 256, 1024], "passes": ["forward", "backward"],
                 "impls": ["tp-row-fixed-order", "tp-column-fixed-order"]},
    "ops": {"matmul": {"shapes": [{"N": 1024, "K": 1024}]},
            "matmul-nccl": {"op": "matmul", "shapes": [{"N": 1024, "K": 1024}],
                            "force_paths": ["chunk-tree.nccl"]}}})",
                                          devices, largest_tp);
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const json report = json::parse(read_text(dir / "out/report.json"));
  // (impl, pass, rows, tp, forced) -> the case
  std::map<std::tuple<std::string, std::string, std::int64_t, int, bool>, json> cases;
  for (const auto& c : report["results"]) {
    cases[{c["impl"].get<std::string>(), c["pass"].get<std::string>(),
           c["rows"].get<std::int64_t>(), c.value("tp", 1), c.contains("forced_path")}] = c;
  }
  auto members = [](const json& c) {
    std::set<std::string> found;
    for (const auto& [layout, paths] : c["paths"].items())
      for (const auto& path : paths)
        if (path.get<std::string>().rfind("chunk-tree", 0) == 0)
          found.insert(path.get<std::string>());
    return found;
  };
  for (const std::string impl : {"tp-row-fixed-order", "tp-column-fixed-order"}) {
    const std::string pass = impl == "tp-row-fixed-order" ? "forward" : "backward";
    for (const std::int64_t rows : {3, 256, 1024}) {
      const json& alone = cases.at({impl, pass, rows, 1, false});
      CHECK(alone["verdict"] == "pass");
      for (int tp = 2; tp <= largest_tp; tp *= 2) {
        INFO(impl << " rows=" << rows << " tp=" << tp);
        const json& peer = cases.at({impl, pass, rows, tp, false});
        const json& nccl = cases.at({impl, pass, rows, tp, true});
        CHECK(peer["verdict"] == "pass");
        CHECK(nccl["verdict"] == "pass");
        // The same bits on both transports and at tp = 1.
        CHECK(peer["fingerprint"] == alone["fingerprint"]);
        CHECK(nccl["fingerprint"] == alone["fingerprint"]);
        const std::set<std::string> peer_paths = members(peer), nccl_paths = members(nccl);
        CHECK(peer_paths.count("chunk-tree:peer-one-shot") == 1);
        CHECK(nccl_paths.count("chunk-tree.nccl") == 1);
        CHECK(nccl_paths.count("chunk-tree:gathered") == 1);
        if (rows == 256) CHECK(peer_paths.count("chunk-tree:peer-two-shot") == 1);
        if (rows >= 256) CHECK(nccl_paths.count("chunk-tree:scattered") == 1);
        // From 4 MiB of subtree (the batch layout's 1024 rows) the GEMM stores the rank's subtree
        // over peer memory: the same bits as tp = 1 and as NCCL's transport (above).
        CHECK(peer_paths.count("chunk-tree:peer-fused") == (rows == 1024 ? 1u : 0u));
        CHECK(nccl_paths.count("chunk-tree:peer-fused") == 0);
      }
    }
  }
  std::filesystem::remove_all(dir);
}
