// Test-only ranks as processes, without a GPU (BITCHECK_TEST_IMPLS=1 and BITCHECK_TEST_RANKS=1): a
// device backend "test-ranks" whose ranks meet through files in the group's directory, and
// all_reduce impls on it. test-ranks-fixed-order waits for every rank of the case at a barrier and
// sums like the CPU's fixed tree; test-rank-crash ends rank 1 with SIGSEGV and test-rank-hang
// leaves it asleep, while the other ranks wait at the barrier as they would in a collective. They
// prove that a rank group records a crashed or hung case as `error`, releases the other ranks and
// goes on, on a machine with no GPU.
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "common/rank_sum.h"
#include "core/op.h"
#include "testing/testing.h"

namespace bitcheck {
namespace {

constexpr const char* backend_name = "test-ranks";

class FileRanks : public DeviceBackend {
 public:
  nlohmann::json meta() const override { return {{"backend", backend_name}}; }
  double copy_bandwidth_gbps() const override { return -1; }
  double copy_bandwidth_gbps(double, int, int, std::size_t) const override { return -1; }
  std::optional<std::size_t> free_memory_bytes() const override { return std::nullopt; }
  std::optional<std::string> context_fault() const override { return std::nullopt; }
  std::optional<std::string> ranks_unavailable() const override { return std::nullopt; }
  void join_ranks(const RankGroup& group) override { group_ = group; }
  RankGroup rank_group() const override { return group_; }
  bool all_ranks_agree(int tp, bool mine) override {
    const std::vector<std::string> values = exchange(tp, mine ? "1" : "0");
    for (const auto& value : values)
      if (value != "1") return false;
    return true;
  }
  // Every rank of [0, tp) writes its value; each waits for all and reads them (a barrier). The
  // ranks of a case are always [0, tp), so a count per tp stays in step across them.
  std::vector<std::string> exchange(int tp, const std::string& value) {
    const std::string prefix = group_.directory + "/exchange-tp" + std::to_string(tp) + "-" +
                               std::to_string(sequence_[tp]++) + "-";
    {
      std::ofstream(prefix + std::to_string(group_.rank) + ".tmp") << value;
      std::filesystem::rename(prefix + std::to_string(group_.rank) + ".tmp",
                              prefix + std::to_string(group_.rank));
    }
    std::vector<std::string> values;
    for (int rank = 0; rank < tp; ++rank) {
      const std::string path = prefix + std::to_string(rank);
      while (!std::filesystem::exists(path))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::string read;
      std::ifstream(path) >> read;
      values.push_back(read);
    }
    return values;
  }

 private:
  RankGroup group_;
  std::map<int, std::uint64_t> sequence_;
};

enum class Fault { none, crash, hang };

ImplInfo info_of(Fault fault) {
  const char* name = fault == Fault::crash  ? "test-rank-crash"
                     : fault == Fault::hang ? "test-rank-hang"
                                            : "test-ranks-fixed-order";
  TensorParallelism parallelism;
  parallelism.max_tp = max_tensor_parallel;
  ImplInfo info = ImplInfo::invariant(
      name, backend_name,
      "test only (BITCHECK_TEST_IMPLS=1, BITCHECK_TEST_RANKS=1): ranks as processes meeting "
      "through files; the faulty ones crash or hang on rank 1");
  info.only_passes({Pass::forward}).on_ranks(parallelism);
  return info;
}

class FileRankAllReduce : public Impl {
 public:
  FileRankAllReduce(FileRanks& ranks, Fault fault)
      : Impl(info_of(fault)), ranks_(ranks), fault_(fault) {}
  void run(Batch& batch) override {
    const int rank = ranks_.rank_group().rank;
    if (batch.tp > 1 && rank == 1 && fault_ == Fault::crash) {
      struct rlimit no_core = {0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      std::signal(SIGSEGV, SIG_DFL);
      std::raise(SIGSEGV);
    }
    if (batch.tp > 1 && rank == 1 && fault_ == Fault::hang) {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (batch.tp > 1) ranks_.exchange(batch.tp, "arrived");  // the collective's meeting point
    const std::int64_t h = batch.spec->dim("H");
    const Tensor& x = batch.in("x");
    Tensor& y = batch.out("y");
    std::vector<float> values(static_cast<std::size_t>(batch.tp));
    for (std::int64_t slot = 0; slot < batch.slots(); ++slot) {
      for (std::int64_t c = 0; c < h; ++c) {
        for (int r = 0; r < batch.tp; ++r)
          values[static_cast<std::size_t>(r)] = x.get((slot * batch.tp + r) * h + c);
        y.set(slot * h + c, sum_ranks(RankSum::fixed_tree, values, batch.spec->dtype, 0, 1));
      }
    }
  }

 private:
  FileRanks& ranks_;
  Fault fault_;
};

}  // namespace

void register_test_ranks(Registry& registry) {
  const char* wanted = std::getenv("BITCHECK_TEST_RANKS");
  if (!test_impls_enabled() || !wanted || std::string(wanted) != "1") return;
  auto backend = std::make_unique<FileRanks>();
  FileRanks& ranks = *backend;
  registry.set_device_backend(backend_name, std::move(backend));
  registry.set_backend_status(backend_name, true, "");
  for (Fault fault : {Fault::none, Fault::crash, Fault::hang})
    registry.add_impl("all_reduce", std::make_unique<FileRankAllReduce>(ranks, fault));
}

}  // namespace bitcheck
