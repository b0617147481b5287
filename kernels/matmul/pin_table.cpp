// Pin table loading, lookup-or-derive, and atomic write-back.
#include "pin_table.h"

#include <filesystem>
#include <functional>

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
  nlohmann::json document = load_json_file(path_);
  JsonCursor root(document, path_);
  root.allow_only({"schema_version", "description", "pins"});
  root.at("schema_version").as_int(1, 1);
  for (const auto& pin : root.at("pins").items()) {
    pin.allow_only({"key", "config", "measured"});
    JsonCursor key = pin.at("key");
    PinEntry entry;
    entry.key.arch = key.at("arch").as_string();
    entry.key.cublaslt_version = static_cast<std::size_t>(key.at("cublaslt_version").as_int(0, INT64_MAX));
    entry.key.dtype = key.at("dtype").as_string();
    entry.key.form = key.at("form").as_string();
    entry.key.n = key.at("N").as_int(1, INT64_MAX);
    entry.key.k = key.at("K").as_int(1, INT64_MAX);
    if (auto tokens = key.find("chunk_tokens")) entry.key.chunk_tokens = tokens->as_int(1, INT64_MAX);
    try {
      entry.config = lt_config_from_json(pin.at("config").node());
    } catch (const std::exception& error) {
      pin.at("config").fail(std::string("a cuBLASLt configuration (") + error.what() + ")");
    }
    entry.source = "pin file " + path_;
    entries_.push_back(entry);
  }
}

PinEntry PinTable::lookup(const PinKey& key, const std::function<LtConfig()>& derive) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  for (const auto& entry : entries_) {
    if (entry.key == key) return entry;
  }
  PinEntry entry{key, derive(), "derived"};
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
                      "split-K 1, checked valid at every M; written by `bitcheck sweep --write-pins`"},
      {"pins", nlohmann::json::array()}};
  for (const auto& entry : entries_) {
    document["pins"].push_back({{"key", entry.key.to_json()}, {"config", lt_config_to_json(entry.config)}});
  }
  write_file_atomically(path_, document.dump(2) + "\n");
  dirty_ = false;
}

}  // namespace bitcheck::cuda
