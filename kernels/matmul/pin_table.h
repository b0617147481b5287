// The cuBLASLt pin table (contract/cublaslt-pins.json): pinned configurations keyed by GPU
// architecture, cuBLASLt version, dtype, GEMM form and (N, K). A missing pin is derived once per
// key (never per call, never per M) and can be written back.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cublaslt_gemm.h"

namespace bitcheck::cuda {

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

struct PinEntry {
  PinKey key;
  LtConfig config;
  std::string source;  // "pin file" or "derived"
};

class PinTable {
 public:
  // Where pins are read from and, with write_back, written to at exit of the sweep.
  static PinTable& instance();
  void configure(const std::string& path, bool write_back);
  // The pinned configuration for `key`, deriving (and remembering) it when the file has none.
  PinEntry lookup(const PinKey& key, const std::function<LtConfig()>& derive);
  // Writes the table (file entries plus derived ones) when write-back was requested.
  void write_back_if_requested();
  const std::string& path() const { return path_; }

 private:
  void load_locked();
  std::mutex mutex_;
  std::string path_ = "contract/cublaslt-pins.json";
  bool write_back_ = false;
  bool loaded_ = false;
  bool dirty_ = false;
  std::vector<PinEntry> entries_;
};

nlohmann::json lt_config_to_json(const LtConfig& config);
LtConfig lt_config_from_json(const nlohmann::json& fields);

}  // namespace bitcheck::cuda
