// The runner's device path on every case of the README's main job (`sweep --op all`, its 3218 CPU
// cases): under BITCHECK_SIMULATE_DEVICE_OUTPUTS=1 the CPU impls' outputs are held as if left on a
// device (run/host_held_output.h), so rows are gathered, compared where they are held and brought
// over only where they differ, for every op, layout, pass and simulated rank of the default sweep.
// The report must be the plain run's, case for case, but for its timings.
#include "cli_support.h"

TEST_CASE("the default CPU sweep with outputs held as on a device gives the plain run's report",
          "[cli][device_outputs]") {
  TempDir dir;
  const std::string plain = dir / "plain", held = dir / "held";
  Run a = run_bitcheck(dir, "sweep --op all --backend cpu --no-progress --out " + quote(plain));
  Run b = run_command(dir, "BITCHECK_SIMULATE_DEVICE_OUTPUTS=1 " + quote(binary) +
                               " sweep --op all --backend cpu --no-progress --out " + quote(held));
  INFO(a.err << b.err);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const nlohmann::json first = nlohmann::json::parse(read_file(plain + "/report.json"));
  const nlohmann::json second = nlohmann::json::parse(read_file(held + "/report.json"));
  REQUIRE(first["results"].size() > 3000);
  const nlohmann::json x = results_without_timings(first), y = results_without_timings(second);
  REQUIRE(x.size() == y.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;
    if (++differing <= 3) UNSCOPED_INFO("first differing case: " << x[i]["id"]);
  }
  CHECK(differing == 0);
  // The held run compared on the "device"; the plain run never did.
  CHECK(second["meta"]["profile"]["device_comparisons"]["bytes"].get<double>() > 0);
  CHECK(first["meta"]["profile"]["device_comparisons"]["bytes"].get<double>() == 0);
}
