// The cuBLASLt pin table (contract/cublaslt-pins.json): pinned configurations keyed by GPU
// architecture, cuBLASLt version, dtype, GEMM form and (N, K). A missing pin is derived once per
// key (never per call, never per M) and can be written back. A pin is one configuration for every
// M, or (written by `bitcheck algos`) a table of M buckets with one configuration each, all of one
// bit-class: configurations measured to give the same bits on every row at every tested M.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
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

// One M bucket of a bucketed pin: rows min_rows..max_rows (max_rows 0: unbounded).
struct PinBucket {
  std::int64_t min_rows = 1;
  std::int64_t max_rows = 0;
  LtConfig config;
  bool contains(std::int64_t rows) const { return rows >= min_rows && (max_rows == 0 || rows <= max_rows); }
};

struct PinEntry {
  PinKey key;
  LtConfig config;                 // the configuration of an unbucketed pin
  std::vector<PinBucket> buckets;  // non-empty: a bucketed pin (then `config` is unused)
  nlohmann::json bit_class;        // bucketed: the class that makes the buckets interchangeable
  std::string table_fingerprint;   // bucketed: 16 hex digits over the buckets and configurations
  nlohmann::json measured;         // as in the file; kept on write-back
  std::string source;              // "pin file ..." or "derived"
  // The configuration for a GEMM of `rows` rows. Throws std::invalid_argument for a bucketed pin
  // when rows < 1.
  const LtConfig& config_for_rows(std::int64_t rows) const;
  const PinBucket* bucket_for_rows(std::int64_t rows) const;  // nullptr when unbucketed
  // What a case records of a bucketed pin at `rows`: the bucket used, the bit-class, and the
  // table's size and fingerprint (not every bucket). Null when unbucketed.
  nlohmann::json bucket_record(std::int64_t rows) const;
  nlohmann::json to_json() const;  // the pin-file form of the entry (bucketed: compact)
};

// Entries of a pin document (schema 1), validated: BadInput naming `file` and the JSON path. A
// bucketed entry may list its distinct configurations once under "configs" and name them by index
// in its buckets (the form to_json writes).
std::vector<PinEntry> parse_pin_document(const nlohmann::json& document, const std::string& file);
// Replaces the entry with the same key as `entry` (pin-file form) in the file at `path`, or appends
// it; every other entry stays as written. Validates the file before and after; atomic write.
void merge_pin_entry(const std::string& path, const nlohmann::json& entry);
// The text of a pin file: indented, each object or array of scalars (a configuration, a bucket) on
// one line.
std::string pin_file_text(const nlohmann::json& document);

class PinTable {
 public:
  // Where pins are read from and, with write_back, written to at exit of the sweep.
  static PinTable& instance();
  void configure(const std::string& path, bool write_back);
  // The pinned configuration for `key`, deriving (and remembering) it when the file has none.
  // Shared, never copied per call: a bucketed table can hold thousands of buckets.
  std::shared_ptr<const PinEntry> lookup(const PinKey& key, const std::function<LtConfig()>& derive);
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
  std::vector<std::shared_ptr<const PinEntry>> entries_;
};

nlohmann::json lt_config_to_json(const LtConfig& config);
LtConfig lt_config_from_json(const nlohmann::json& fields);

}  // namespace bitcheck::cuda
