// Pin table loading (single-configuration and bucketed pins) from a directory of one file per key
// or from one file, lookup-or-derive, merging one entry into its file, and atomic write-back.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <stdexcept>

#include "core/error.h"
#include "core/json_input.h"
#include "matmul/pin_format.h"
#include "matmul/pin_table.h"
#include "report/report.h"

namespace bitcheck::cuda {

bool PinKey::operator==(const PinKey& other) const {
  return arch == other.arch && cublaslt_version == other.cublaslt_version && dtype == other.dtype &&
         form == other.form && n == other.n && k == other.k && chunk_tokens == other.chunk_tokens;
}

nlohmann::json PinKey::to_json() const {
  nlohmann::json j = {{"arch", arch},   {"cublaslt_version", cublaslt_version},
                      {"dtype", dtype}, {"form", form},
                      {"N", n},         {"K", k}};
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
  // Buckets cover every M from 1 in order (checked on load): the last one starting at or below M.
  auto after = std::upper_bound(buckets.begin(), buckets.end(), rows,
                                [](std::int64_t m, const PinBucket& b) { return m < b.min_rows; });
  if (after == buckets.begin()) return nullptr;
  const PinBucket& bucket = *std::prev(after);
  return bucket.contains(rows) ? &bucket : nullptr;
}

nlohmann::json PinEntry::bucket_record(std::int64_t rows) const {
  const PinBucket* used = bucket_for_rows(rows);
  if (used == nullptr) return nullptr;
  return {{"bucket", {{"min_rows", used->min_rows}, {"max_rows", used->max_rows}, {"rows", rows}}},
          {"bit_class", bit_class},
          {"table", {{"buckets", buckets.size()}, {"fingerprint", table_fingerprint}}}};
}

const LtConfig& PinEntry::config_for_rows(std::int64_t rows) const {
  if (buckets.empty()) return config;
  if (const PinBucket* bucket = bucket_for_rows(rows)) return bucket->config;
  throw std::invalid_argument("the bucketed cuBLASLt pin for " + key.to_json().dump() +
                              " has no bucket for M=" + std::to_string(rows));
}

nlohmann::json PinEntry::to_json() const {
  nlohmann::json j = {{"key", key.to_json()}};
  if (buckets.empty()) {
    j["config"] = lt_config_to_json(config);
  } else {
    // Compact form: each distinct kernel once in "configs", buckets naming it by index.
    std::vector<LtConfig> distinct;
    j["configs"] = nlohmann::json::array();
    j["buckets"] = nlohmann::json::array();
    for (const auto& bucket : buckets) {
      std::size_t index = 0;
      while (index < distinct.size() &&
             !(distinct[index].same_kernel(bucket.config) &&
               distinct[index].workspace_bytes == bucket.config.workspace_bytes)) {
        ++index;
      }
      if (index == distinct.size()) {
        distinct.push_back(bucket.config);
        j["configs"].push_back(lt_config_to_json(bucket.config));
      }
      nlohmann::json b = {{"min_rows", bucket.min_rows}, {"config", index}};
      if (bucket.max_rows) b["max_rows"] = bucket.max_rows;
      j["buckets"].push_back(b);
    }
    j["bit_class"] = bit_class;
  }
  if (!measured.is_null()) j["measured"] = measured;
  return j;
}

namespace {

// Two-space indentation, but an object or array whose members are all scalars on one line: a
// configuration or a bucket per line, so a table of a thousand buckets stays readable and small.
void write_pretty(const nlohmann::json& j, int indent, std::string& out) {
  const bool container = j.is_object() || j.is_array();
  if (!container || j.empty()) {
    out += j.dump();
    return;
  }
  bool flat = true;
  for (const auto& member : j) flat = flat && !member.is_object() && !member.is_array();
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  out += j.is_object() ? (flat ? "{" : "{\n") : (flat ? "[" : "[\n");
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += flat ? ", " : ",\n";
    first = false;
    if (!flat) out += pad;
    if (j.is_object()) out += nlohmann::json(it.key()).dump() + ": ";
    write_pretty(*it, indent + 2, out);
  }
  if (!flat) out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
  out += j.is_object() ? "}" : "]";
}

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
  result.cublaslt_version =
      static_cast<std::size_t>(key.at("cublaslt_version").as_int(0, INT64_MAX));
  result.dtype = key.at("dtype").as_string();
  result.form = key.at("form").as_string();
  result.n = key.at("N").as_int(1, INT64_MAX);
  result.k = key.at("K").as_int(1, INT64_MAX);
  if (auto tokens = key.find("chunk_tokens")) result.chunk_tokens = tokens->as_int(1, INT64_MAX);
  return result;
}

// A bucketed pin: buckets covering every M from 1 in order, the last unbounded, and the bit-class
// record that says why switching configuration between buckets changes no bit. A bucket's config
// is a configuration, or the index of one in the entry's "configs" (the compact form).
void read_buckets(const JsonCursor& pin, const JsonCursor& buckets, PinEntry& entry) {
  buckets.expect_array(false);
  std::vector<LtConfig> configs;
  std::int64_t config_count = 0;
  if (auto listed = pin.find("configs")) {
    listed->expect_array(false);
    for (const auto& config : listed->items()) configs.push_back(read_config(config));
    config_count = static_cast<std::int64_t>(configs.size());
  }
  std::vector<RowBucket> ranges;
  for (const auto& bucket : buckets.items()) {
    bucket.allow_only({"min_rows", "max_rows", "config"});
    PinBucket read;
    read.min_rows = bucket.at("min_rows").as_int(1, INT64_MAX);
    if (auto max_rows = bucket.find("max_rows")) read.max_rows = max_rows->as_int(1, INT64_MAX);
    const JsonCursor config = bucket.at("config");
    if (config.node().is_number()) {
      if (config_count == 0)
        config.fail("a configuration object (the entry has no \"configs\" list)");
      read.config = configs[static_cast<std::size_t>(config.as_int(0, config_count - 1))];
    } else {
      read.config = read_config(config);
    }
    entry.buckets.push_back(read);
    ranges.push_back({read.min_rows, read.max_rows});
  }
  if (auto problem = bucket_coverage_problem(ranges)) {
    buckets.fail("M buckets covering every M from 1 in order, the last without max_rows (" +
                 *problem + ")");
  }
  JsonCursor bit_class = pin.at("bit_class");
  bit_class.expect_object();
  bit_class.at("fingerprint").as_string();
  entry.bit_class = bit_class.node();
}

}  // namespace

std::string pin_file_text(const nlohmann::json& document) {
  std::string out;
  write_pretty(document, 0, out);
  return out + "\n";
}

std::vector<PinEntry> parse_pin_document(const nlohmann::json& document, const std::string& file) {
  JsonCursor root(document, file);
  root.allow_only({"schema_version", "description", "pins"});
  root.at("schema_version").as_int(1, 1);
  std::vector<PinEntry> entries;
  for (const auto& pin : root.at("pins").items()) {
    pin.allow_only({"key", "config", "configs", "buckets", "bit_class", "measured"});
    PinEntry entry;
    entry.key = read_key(pin.at("key"));
    auto config = pin.find("config");
    auto buckets = pin.find("buckets");
    if (config.has_value() == buckets.has_value()) {
      pin.fail(
          "exactly one of \"config\" (one configuration for every M) and \"buckets\" (one per M "
          "bucket)");
    }
    if (config) {
      if (pin.find("bit_class"))
        pin.at("bit_class").fail("no bit_class beside a single \"config\"");
      if (pin.find("configs")) pin.at("configs").fail("no configs list beside a single \"config\"");
      entry.config = read_config(*config);
    } else {
      read_buckets(pin, *buckets, entry);
      const nlohmann::json compact = entry.to_json();
      std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
      for (const char c : compact.at("buckets").dump() + compact.at("configs").dump())
        hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
      char text[17];
      std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
      entry.table_fingerprint = text;
    }
    if (auto measured = pin.find("measured")) entry.measured = measured->node();
    entry.source = "pin file " + file;
    entries.push_back(entry);
  }
  return entries;
}

namespace {

constexpr const char* kPinFileDescription =
    "cuBLASLt configuration pinned for the key in the file's name (arch, cuBLASLt version, dtype, "
    "form, N, K): one split-K-1 configuration for every M, or one per M bucket all of one "
    "bit-class "
    "(bitcheck algos); how they were made: contract/pins/README.md";

nlohmann::json empty_pin_document(const std::string& description) {
  return {{"schema_version", 1}, {"description", description}, {"pins", nlohmann::json::array()}};
}

// Replaces the entry with the key of `entry` in the file at `file`, or appends it.
void merge_into_file(const std::string& file, const PinEntry& entry,
                     const std::string& description) {
  nlohmann::json document = empty_pin_document(description);
  if (std::filesystem::exists(file)) document = load_json_file(file);
  const std::vector<PinEntry> existing = parse_pin_document(document, file);
  // Written in the compact form (each kernel once, buckets by index), whatever form it came in.
  const nlohmann::json compact = entry.to_json();
  bool replaced = false;
  for (std::size_t i = 0; i < existing.size(); ++i) {
    if (existing[i].key == entry.key) {
      document["pins"][i] = compact;
      replaced = true;
    }
  }
  if (!replaced) document["pins"].push_back(compact);
  parse_pin_document(document, file);
  const auto parent = std::filesystem::path(file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_file_atomically(file, pin_file_text(document));
}

}  // namespace

std::string pin_file_name(const PinKey& key) {
  return pin_key_name(key.to_json()) + ".json";
}

bool is_pin_directory(const std::string& path) {
  if (std::filesystem::is_directory(path)) return true;
  return !std::filesystem::exists(path) && std::filesystem::path(path).extension() != ".json";
}

std::vector<PinFile> read_pin_files(const std::string& path) {
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& item : std::filesystem::directory_iterator(path)) {
      if (item.is_regular_file() && item.path().extension() == ".json") {
        files.push_back(item.path().string());
      }
    }
    std::sort(files.begin(), files.end());
  } else if (std::filesystem::exists(path)) {
    files.push_back(path);
  }
  std::vector<PinFile> read;
  for (const auto& file : files) read.push_back({file, load_json_file(file)});
  return read;
}

std::vector<PinEntry> read_pin_entries(const std::string& path) {
  const bool directory = std::filesystem::is_directory(path);
  std::vector<PinEntry> entries;
  for (const PinFile& file : read_pin_files(path)) {
    std::vector<PinEntry> parsed = parse_pin_document(file.document, file.path);
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      const std::string where = "/pins/" + std::to_string(i) + "/key";
      const std::string expected = pin_file_name(parsed[i].key);
      if (directory && std::filesystem::path(file.path).filename() != expected) {
        throw BadInput(file.path, where,
                       "only the key its name says (this key belongs in " + expected + ")");
      }
      for (const auto& earlier : entries) {
        if (earlier.key == parsed[i].key) throw BadInput(file.path, where, "a key not held twice");
      }
      entries.push_back(std::move(parsed[i]));
    }
  }
  return entries;
}

void merge_pin_entry(const std::string& path, const nlohmann::json& entry) {
  const nlohmann::json wrapped = {{"schema_version", 1}, {"pins", nlohmann::json::array({entry})}};
  const PinEntry parsed = parse_pin_document(wrapped, "the pin entry to merge").front();
  if (is_pin_directory(path)) {
    merge_into_file((std::filesystem::path(path) / pin_file_name(parsed.key)).string(), parsed,
                    kPinFileDescription);
    return;
  }
  merge_into_file(path, parsed,
                  "cuBLASLt configurations pinned per (arch, cuBLASLt version, dtype, form, N, K)");
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
  // Nothing there yet: every key is derived.
  for (auto& entry : read_pin_entries(path_))
    entries_.push_back(std::make_shared<const PinEntry>(std::move(entry)));
}

std::shared_ptr<const PinEntry> PinTable::lookup(const PinKey& key,
                                                 const std::function<LtConfig()>& derive) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  for (const auto& entry : entries_) {
    if (entry->key == key) return entry;
  }
  auto entry = std::make_shared<PinEntry>();
  entry->key = key;
  entry->config = derive();
  entry->source = "derived";
  entries_.push_back(entry);
  dirty_ = true;
  return entry;
}

std::shared_ptr<const PinEntry> PinTable::find(const PinKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  for (const auto& entry : entries_) {
    if (entry->key == key) return entry;
  }
  return nullptr;
}

void PinTable::write_back_if_requested() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!write_back_ || !dirty_) return;
  if (is_pin_directory(path_)) {
    for (const auto& entry : entries_) {
      if (entry->source == "derived") merge_pin_entry(path_, entry->to_json());
    }
    dirty_ = false;
    return;
  }
  nlohmann::json document = empty_pin_document(
      "cuBLASLt configurations pinned per (arch, cuBLASLt version, dtype, form, N, K): "
      "derived pins are split-K 1, checked valid at every M (`bitcheck sweep --write-pins`); "
      "bucketed pins hold one configuration per M bucket, all of one bit-class (`bitcheck algos`)");
  for (const auto& entry : entries_) {
    document["pins"].push_back(entry->to_json());
  }
  write_file_atomically(path_, pin_file_text(document));
  dirty_ = false;
}

}  // namespace bitcheck::cuda
