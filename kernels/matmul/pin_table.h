// The pinned matmul's cuBLASLt pin tables (contract/pins/, one file per key): configurations keyed
// by GPU architecture, cuBLASLt version, dtype, GEMM form and (N, K). A missing pin is derived once
// per key (never per call, never per M) and can be written back. A pin is one configuration for
// every M, or (written by `bitcheck algos`) a table of M buckets with one configuration each, all
// of one bit-class: configurations measured to give the same bits on every row at every tested M.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "matmul/cublaslt_gemm.h"
#include "matmul/pin_lookup.h"

namespace bitcheck::cuda {

// One M bucket of a bucketed pin: rows min_rows..max_rows (max_rows 0: unbounded).
struct PinBucket {
  std::int64_t min_rows = 1;
  std::int64_t max_rows = 0;
  LtConfig config;
  bool contains(std::int64_t rows) const {
    return rows >= min_rows && (max_rows == 0 || rows <= max_rows);
  }
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
// The name of the file that holds `key` in a pin directory, readable and one per key, e.g.
// "sm90-lt13.1-bf16-forward-N4096-K14336.json" (weight_grad: "...-T256.json").
std::string pin_file_name(const PinKey& key);
// Whether `path` names a pin directory: an existing directory, or a path not ending in ".json".
bool is_pin_directory(const std::string& path);
// The pin documents at `path`: every *.json file of a directory in name order, or the one file;
// none when nothing exists there. BadInput naming the file when one is not JSON.
struct PinFile {
  std::string path;
  nlohmann::json document;
};
std::vector<PinFile> read_pin_files(const std::string& path);
// Every entry at `path`, validated, each with its file as source. In a directory each key must
// sit in the file named after it (pin_file_name), once.
std::vector<PinEntry> read_pin_entries(const std::string& path);
// Replaces the entry with the same key as `entry` (pin-file form), or appends it: in a directory,
// in the key's own file (created when missing); otherwise in the file at `path`. Every other entry
// stays as written. Validates the file before and after; atomic write.
void merge_pin_entry(const std::string& path, const nlohmann::json& entry);
// The text of a pin file: indented, each object or array of scalars (a configuration, a bucket) on
// one line.
std::string pin_file_text(const nlohmann::json& document);

class PinTable {
 public:
  // Where pins are read from (a directory or one file) and, with write_back, where pins derived
  // during the sweep are written at its end.
  static PinTable& instance();
  void configure(const std::string& path, bool write_back);
  // The pinned configuration for `key`, deriving (and remembering) it when the file has none.
  // Shared, never copied per call: a bucketed table can hold thousands of buckets.
  std::shared_ptr<const PinEntry> lookup(const PinKey& key,
                                         const std::function<LtConfig()>& derive);
  // The table's entry for `key`, or nullptr; never derives.
  std::shared_ptr<const PinEntry> find(const PinKey& key);
  // Writes the pins derived in this run when write-back was requested: each into its key's file
  // in a directory, or the whole table into a single file.
  void write_back_if_requested();
  const std::string& path() const { return path_; }

 private:
  void load_locked();
  std::mutex mutex_;
  std::string path_ = "contract/pins";
  bool write_back_ = false;
  bool loaded_ = false;
  bool dirty_ = false;
  std::vector<std::shared_ptr<const PinEntry>> entries_;
};

LtConfig lt_config_from_json(const nlohmann::json& fields);

}  // namespace bitcheck::cuda
