// Planning a run after it has started: the parent of `sweep --devices` plans (case count, queue
// units) with the --pins the shards get, so "batches": "switch-points" gives it the cases the same
// sweep runs in one process. The pinned matmul's switch points come from its pin table but need a
// GPU, so a stand-in takes its switch point from the pins its run hook was handed.
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "manifest.h"
#include "sweep/sweep.h"
#include "temp_dir.h"

using namespace bitcheck;

namespace {

// A matmul whose launch path switches at M = 40 under one pin table and nowhere under any other,
// as the pinned matmul does where only one of two tables holds a bucketed pin for the shape. It
// computes with the fixed-order CPU matmul.
class PinSwitchingMatmul : public Impl {
 public:
  PinSwitchingMatmul(std::shared_ptr<const std::string> pins_in_use, std::string switching_pins,
                     Impl& fixed_order)
      : Impl(ImplInfo::invariant(
                 "pin-switching", "cpu",
                 "a stand-in of the pinned matmul: switches path at M = 40 under one pin table")
                 .only_passes({Pass::forward})
                 .with_paths(fixed_order.paths())),
        pins_in_use_(std::move(pins_in_use)),
        switching_pins_(std::move(switching_pins)),
        fixed_order_(fixed_order) {}
  std::vector<SwitchPoint> switch_points(const CaseSpec&, std::int64_t) const override {
    if (*pins_in_use_ != switching_pins_) return {};
    return {{40, "bucket:before 40", "bucket:from 40"}};
  }
  void run(Batch& batch) override { fixed_order_.run(batch); }

 private:
  std::shared_ptr<const std::string> pins_in_use_;
  std::string switching_pins_;
  Impl& fixed_order_;
};

std::vector<std::string> case_ids(const std::vector<CaseSpec>& cases) {
  std::vector<std::string> ids;
  for (const CaseSpec& c : cases) ids.push_back(c.id());
  return ids;
}

std::vector<std::string> report_case_ids(const std::string& path) {
  const nlohmann::json report = load_json_file(path);
  std::vector<std::string> ids;
  for (const auto& result : report.at("results")) ids.push_back(result.at("id").get<std::string>());
  return ids;
}

}  // namespace

TEST_CASE("sweep --devices with --pins plans the switch-points cases one process runs",
          "[sweep][devices][pins]") {
  test_support::TempDir dir;
  const std::string spec_path = dir / "spec.json";
  std::ofstream(spec_path) << R"({
    "schema_version": 1,
    "description": "matmul at one shape, batches from the impls' switch points",
    "defaults": {"impls": ["pin-switching"], "dtypes": ["bf16"], "passes": ["forward"],
                 "layouts": ["alone", "batch"]},
    "ops": {"matmul": {"shapes": [{"N": 16, "K": 32}], "batches": "switch-points",
                       "switch_max_batch": 64}}
  })";
  const std::string pins = dir / "pins";

  // A fresh process: the stand-in's pins are the default until a run starts.
  Registry registry;
  register_ops_and_cpu(registry);
  auto pins_in_use = std::make_shared<std::string>(RunSettings{}.pins);
  registry.add_run_hook(
      {[pins_in_use](const RunSettings& run) { *pins_in_use = run.pins; }, [] {}});
  registry.add_impl("matmul",
                    std::make_unique<PinSwitchingMatmul>(
                        pins_in_use, pins, *registry.find_impl("matmul", "cpu-fixed-order")));

  std::ostringstream results, notes;
  StreamPrinter printer(results, notes, false);
  SweepOptions one_process;
  one_process.spec_path = spec_path;
  one_process.overrides.backend = "cpu";
  one_process.run.pins = pins;
  one_process.out_dir = dir / "out";
  one_process.argv = {"bitcheck", "sweep"};
  one_process.progress = false;
  one_process.printer = &printer;
  SweepOptions on_devices = one_process;
  on_devices.devices = {"0", "1"};

  // What the parent of --devices plans before it starts a shard.
  const std::vector<std::string> parent_plan = case_ids(plan_sweep(on_devices, registry).cases);

  REQUIRE(run_sweep(one_process, registry) == exit_pass);
  const std::vector<std::string> ran = report_case_ids(dir / "out/report.json");
  CHECK(parent_plan == ran);
  // Batch 1 and both sides of the switch point: the planning saw the --pins table.
  REQUIRE(ran.size() == 3);
  CHECK(ran[1].find("/M=39/") != std::string::npos);
  CHECK(ran[2].find("/M=40/") != std::string::npos);

  // The control: the same sweep under the default pins has no switch point to cross.
  SweepOptions default_pins = on_devices;
  default_pins.run = RunSettings{};
  CHECK(plan_sweep(default_pins, registry).cases.size() == 1);
}
