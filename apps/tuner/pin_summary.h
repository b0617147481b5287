// `bitcheck pins show|diff`: a pin table (contract/pins/, one file per key, or one pin file) or the
// change between two of them in a few lines per key: key, class fingerprint, bucket count,
// configurations added and removed, rows verified. Reads the JSON alone: no GPU, no cuBLASLt.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

// One pin entry, summarized.
struct PinSummary {
  std::string key;   // pin_key_name
  std::string file;  // the file that holds it
  bool bucketed = false;
  std::string class_fingerprint;              // bucketed: the bit-class fingerprint
  std::size_t buckets = 0;                    // bucketed: M buckets
  std::vector<std::string> configurations;    // distinct configurations ("describe"), sorted
  std::optional<std::int64_t> rows_verified;  // rows whose bits define the class, where recorded
  bool refined = false;                       // made by `algos --refine`
  nlohmann::json entry;                       // as written, to tell a change
};

// Every entry at `path` (a directory's *.json files in name order, or one file), in order.
// BadInput naming the file, the JSON path and what was expected for anything that is not a pin
// table, or for a path that does not exist.
std::vector<PinSummary> summarize_pins(const std::string& path);

// A few lines per key: all keys, or only `key` (a pin_key_name) when it is not empty (BadInput
// when no entry has it).
std::string pins_show_text(const std::string& path, const std::vector<PinSummary>& pins,
                           const std::string& key);
// The keys added, removed and changed from `before` to `after`, and how many stayed the same.
std::string pins_diff_text(const std::string& before_path, const std::vector<PinSummary>& before,
                           const std::string& after_path, const std::vector<PinSummary>& after);

}  // namespace bitcheck
