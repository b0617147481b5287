// Pin table loading (single-configuration and bucketed pins), lookup-or-derive, merging one
// entry into a file, and atomic write-back.
#include "pin_table.h"

#include <filesystem>
#include <functional>
#include <stdexcept>

#include "bitcheck/algos.h"
#include "bitcheck/error.h"
#include "bitcheck/json_input.h"
#include "bitcheck/report.h"

namespace bitcheck::cuda {

bool PinKey::operator==(const PinKey& other) const {
  return arch == other.arch && cublaslt_version == other.cublaslt_version && dtype == other.dtype &&
         form == other.form && n == other.n && k == other.k && chunk_tokens == other.chunk_tokens;
}

nlohmann::json PinKey::to_json() const {
  nlohmann::json j = {{"arch", arch}, {"cublaslt_version", cublaslt_version}, {"dtype", dtype},
                      {"form", form}, {"N", n}, {"K", k}};
  if (form == "weight_grad") j["chunk_tokens"] = chunk_tokens;
  return j;
}

nlohmann::json lt_config_to_json(const LtConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : config.fields()) j[name] = value;
  j["describe"] = config.describe();
  return j;
}

LtConfig lt_config_from_json(const nlohmann::json& fields) {
  std::vector<std::pair<std::string, std::int64_t>> list;
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    if (it.key() == "describe") continue;
    list.emplace_back(it.key(), it.value().get<std::int64_t>());
  }
  return LtConfig::from_fields(list);
}

const PinBucket* PinEntry::bucket_for_rows(std::int64_t rows) const {
  for (const auto& bucket : buckets) {
    if (bucket.contains(rows)) return &bucket;
  }
  return nullptr;
}

const LtConfig& PinEntry::config_for_rows(std::int64_t rows) const {
  if (buckets.empty()) return config;
  if (const PinBucket* bucket = bucket_for_rows(rows)) return bucket->config;
  throw std::invalid_argument("the bucketed cuBLASLt pin for " + key.to_json().dump() + " has no bucket for M=" +
                              std::to_string(rows));
}

nlohmann::json PinEntry::to_json() const {
  nlohmann::json j = {{"key", key.to_json()}};
  if (buckets.empty()) {
    j["config"] = lt_config_to_json(config);
  } else {
    j["buckets"] = nlohmann::json::array();
    for (const auto& bucket : buckets) {
      nlohmann::json b = {{"min_rows", bucket.min_rows}, {"config", lt_config_to_json(bucket.config)}};
      if (bucket.max_rows) b["max_rows"] = bucket.max_rows;
      j["buckets"].push_back(b);
    }
    j["bit_class"] = bit_class;
  }
  if (!measured.is_null()) j["measured"] = measured;
  return j;
}

namespace {

LtConfig read_config(const JsonCursor& cursor) {
  cursor.expect_object();
  try {
    return lt_config_from_json(cursor.node());
  } catch (const std::exception& error) {
    cursor.fail(std::string("a cuBLASLt configuration (") + error.what() + ")");
  }
}

PinKey read_key(const JsonCursor& key) {
  PinKey result;
  result.arch = key.at("arch").as_string();
  result.cublaslt_version = static_cast<std::size_t>(key.at("cublaslt_version").as_int(0, INT64_MAX));
  result.dtype = key.at("dtype").as_string();
  result.form = key.at("form").as_string();
  result.n = key.at("N").as_int(1, INT64_MAX);
  result.k = key.at("K").as_int(1, INT64_MAX);
  if (auto tokens = key.find("chunk_tokens")) result.chunk_tokens = tokens->as_int(1, INT64_MAX);
  return result;
}

// A bucketed pin: buckets covering every M from 1 in order, the last unbounded, and the bit-class
// record that says why switching configuration between buckets changes no bit.
void read_buckets(const JsonCursor& pin, const JsonCursor& buckets, PinEntry& entry) {
  buckets.expect_array(false);
  std::vector<RowBucket> ranges;
  for (const auto& bucket : buckets.items()) {
    bucket.allow_only({"min_rows", "max_rows", "config"});
    PinBucket read;
    read.min_rows = bucket.at("min_rows").as_int(1, INT64_MAX);
    if (auto max_rows = bucket.find("max_rows")) read.max_rows = max_rows->as_int(1, INT64_MAX);
    read.config = read_config(bucket.at("config"));
    entry.buckets.push_back(read);
    ranges.push_back({read.min_rows, read.max_rows});
  }
  if (auto problem = bucket_coverage_problem(ranges)) {
    buckets.fail("M buckets covering every M from 1 in order, the last without max_rows (" + *problem + ")");
  }
  JsonCursor bit_class = pin.at("bit_class");
  bit_class.expect_object();
  bit_class.at("fingerprint").as_string();
  entry.bit_class = bit_class.node();
}

}  // namespace

std::vector<PinEntry> parse_pin_document(const nlohmann::json& document, const std::string& file) {
  JsonCursor root(document, file);
  root.allow_only({"schema_version", "description", "pins"});
  root.at("schema_version").as_int(1, 1);
  std::vector<PinEntry> entries;
  for (const auto& pin : root.at("pins").items()) {
    pin.allow_only({"key", "config", "buckets", "bit_class", "measured"});
    PinEntry entry;
    entry.key = read_key(pin.at("key"));
    auto config = pin.find("config");
    auto buckets = pin.find("buckets");
    if (config.has_value() == buckets.has_value()) {
      pin.fail("exactly one of \"config\" (one configuration for every M) and \"buckets\" (one per M bucket)");
    }
    if (config) {
      if (pin.find("bit_class")) pin.at("bit_class").fail("no bit_class beside a single \"config\"");
      entry.config = read_config(*config);
    } else {
      read_buckets(pin, *buckets, entry);
    }
    if (auto measured = pin.find("measured")) entry.measured = measured->node();
    entry.source = "pin file " + file;
    entries.push_back(entry);
  }
  return entries;
}

void merge_pin_entry(const std::string& path, const nlohmann::json& entry) {
  const nlohmann::json wrapped = {{"schema_version", 1}, {"pins", nlohmann::json::array({entry})}};
  const PinKey key = parse_pin_document(wrapped, "the pin entry to merge").front().key;
  nlohmann::json document = {{"schema_version", 1},
                             {"description", "cuBLASLt configurations pinned per (arch, cuBLASLt version, dtype, form, N, K)"},
                             {"pins", nlohmann::json::array()}};
  if (std::filesystem::exists(path)) document = load_json_file(path);
  const std::vector<PinEntry> existing = parse_pin_document(document, path);
  bool replaced = false;
  for (std::size_t i = 0; i < existing.size(); ++i) {
    if (existing[i].key == key) {
      document["pins"][i] = entry;
      replaced = true;
    }
  }
  if (!replaced) document["pins"].push_back(entry);
  parse_pin_document(document, path);
  write_file_atomically(path, document.dump(2) + "\n");
}

PinTable& PinTable::instance() {
  static PinTable table;
  return table;
}

void PinTable::configure(const std::string& path, bool write_back) {
  std::lock_guard<std::mutex> lock(mutex_);
  path_ = path;
  write_back_ = write_back;
  loaded_ = false;
  entries_.clear();
}

void PinTable::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  if (!std::filesystem::exists(path_)) return;  // no pins yet: every key is derived
  const nlohmann::json document = load_json_file(path_);
  entries_ = parse_pin_document(document, path_);
}

PinEntry PinTable::lookup(const PinKey& key, const std::function<LtConfig()>& derive) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  for (const auto& entry : entries_) {
    if (entry.key == key) return entry;
  }
  PinEntry entry;
  entry.key = key;
  entry.config = derive();
  entry.source = "derived";
  entries_.push_back(entry);
  dirty_ = true;
  return entry;
}

void PinTable::write_back_if_requested() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!write_back_ || !dirty_) return;
  nlohmann::json document = {
      {"schema_version", 1},
      {"description", "cuBLASLt configurations pinned per (arch, cuBLASLt version, dtype, form, N, K): "
                      "derived pins are split-K 1, checked valid at every M (`bitcheck sweep --write-pins`); "
                      "bucketed pins hold one configuration per M bucket, all of one bit-class (`bitcheck algos`)"},
      {"pins", nlohmann::json::array()}};
  for (const auto& entry : entries_) {
    document["pins"].push_back(entry.to_json());
  }
  write_file_atomically(path_, document.dump(2) + "\n");
  dirty_ = false;
}

}  // namespace bitcheck::cuda
