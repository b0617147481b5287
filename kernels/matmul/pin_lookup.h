// What the pinned GEMMs (matmul's, lm_head's) ask of the pin table (pin_table.h): the pinned
// configuration of one GEMM with what a case records of it, the switch points of a bucketed pin,
// and the run hook that says where the table is read from and writes derived pins back.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/paths.h"
#include "core/run_settings.h"
#include "matmul/cublaslt_gemm.h"

namespace bitcheck::cuda {

struct PinEntry;

// What a pin is keyed by: GPU architecture, cuBLASLt version, dtype, GEMM form and (N, K).
struct PinKey {
  std::string arch;  // e.g. "sm_90"
  std::size_t cublaslt_version = 0;
  std::string dtype;  // bf16 | fp16 | fp32
  std::string form;   // forward | input_grad | weight_grad
  std::int64_t n = 0, k = 0;
  std::int64_t chunk_tokens = 0;  // weight_grad only
  bool operator==(const PinKey& other) const;
  nlohmann::json to_json() const;
};

// The pinned configuration of one GEMM of `rows` rows, from one shared pin entry.
class PinnedConfig {
 public:
  PinnedConfig(std::shared_ptr<const PinEntry> entry, std::int64_t rows);
  const LtConfig& config() const { return *config_; }
  // What a case records: the configuration, its source (the pin file, or "derived"), and for a
  // bucketed pin the bucket used, the bit-class and the table's size and fingerprint.
  nlohmann::json record() const;
  // The launch path a call records: "<min>-<max>" rows of the bucket used (a member of the
  // "bucket" family), or "" for an unbucketed pin.
  std::string bucket_member() const;
  // Records the launch path (core/paths.h): "bucket:<member>", or "pinned" when unbucketed.
  void record_path() const;

 private:
  std::shared_ptr<const PinEntry> entry_;
  std::int64_t rows_;
  const LtConfig* config_;
};

// The pin table's part in a run (Registry::add_run_hook): at its start, where pins are read from
// (RunSettings::pins: a directory of one file per key, contract/pins by default, or a single pin
// file) and whether pins derived during the run are written back there (RunSettings::write_pins);
// at its end, that write-back.
RunHook pin_table_run_hook();
// The pin for `key` at `rows` (weight_grad: the chunk's tokens), deriving the configuration once
// per key with `derive` when the table has none. Throws std::invalid_argument for a bucketed pin
// when rows < 1.
PinnedConfig lookup_pin(const PinKey& key, std::int64_t rows,
                        const std::function<LtConfig()>& derive);
// The rows where the table's bucketed pin for `key` changes configuration (a bucket whose
// configuration differs from the one before it starts there), up to `max_rows`: the switch points
// of a pinned GEMM. Empty for an unbucketed pin or a key the table does not hold.
std::vector<std::int64_t> pin_configuration_edges(const PinKey& key, std::int64_t max_rows);
// The same as a pinned GEMM's switch points (Impl::switch_points): one per configuration edge.
std::vector<SwitchPoint> pin_switch_points(const PinKey& key, std::int64_t max_rows);
// A configuration as JSON: its fields and "describe".
nlohmann::json lt_config_to_json(const LtConfig& config);

}  // namespace bitcheck::cuda
