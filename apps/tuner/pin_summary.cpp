// Pin-table summaries for `bitcheck pins show|diff`, read from the JSON with the same validation
// errors as every other input file (file, JSON path, what was expected).
#include "tuner/pin_summary.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_input.h"
#include "matmul/pin_format.h"

namespace bitcheck {
namespace {

// A configuration by its words, or its fields where a hand-written file has no "describe".
std::string configuration_name(const JsonCursor& config) {
  config.expect_object();
  if (auto describe = config.find("describe")) return describe->as_string();
  return config.node().dump();
}

PinSummary summarize_entry(const JsonCursor& pin, const std::string& file) {
  pin.expect_object();
  PinSummary summary;
  summary.file = file;
  summary.entry = pin.node();
  const JsonCursor key = pin.at("key");
  key.expect_object();
  try {
    summary.key = pin_key_name(key.node());
  } catch (const nlohmann::json::exception&) {
    key.fail(
        "a pin key: arch, cublaslt_version, dtype, form, N, K (and chunk_tokens for weight_grad)");
  }
  auto config = pin.find("config");
  auto buckets = pin.find("buckets");
  if (config.has_value() == buckets.has_value()) {
    pin.fail(
        "exactly one of \"config\" (one configuration for every M) and \"buckets\" (one per M "
        "bucket)");
  }
  if (config) {
    summary.configurations.push_back(configuration_name(*config));
    return summary;
  }
  summary.bucketed = true;
  std::vector<std::string> listed;
  if (auto configs = pin.find("configs")) {
    configs->expect_array(false);
    for (const auto& item : configs->items()) listed.push_back(configuration_name(item));
  }
  buckets->expect_array(false);
  std::set<std::string> distinct;
  for (const auto& bucket : buckets->items()) {
    bucket.expect_object();
    bucket.at("min_rows").as_int(1, INT64_MAX);
    const JsonCursor used = bucket.at("config");
    if (used.node().is_number()) {
      if (listed.empty()) used.fail("a configuration object (the entry has no \"configs\" list)");
      distinct.insert(listed[static_cast<std::size_t>(
          used.as_int(0, static_cast<std::int64_t>(listed.size()) - 1))]);
    } else {
      distinct.insert(configuration_name(used));
    }
    ++summary.buckets;
  }
  summary.configurations.assign(distinct.begin(), distinct.end());
  const JsonCursor bit_class = pin.at("bit_class");
  bit_class.expect_object();
  summary.class_fingerprint = bit_class.at("fingerprint").as_string();
  if (auto rows = bit_class.find("rows")) summary.rows_verified = rows->as_int(0, INT64_MAX);
  summary.refined = bit_class.find("refined").has_value();
  return summary;
}

std::vector<std::string> pin_files(const std::string& path) {
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& item : std::filesystem::directory_iterator(path)) {
      if (item.is_regular_file() && item.path().extension() == ".json") {
        files.push_back(item.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  if (!std::filesystem::exists(path)) {
    throw BadInput(path, "$",
                   "a pin table: a directory of pin files (contract/pins) or one pin file");
  }
  return {path};
}

std::string count_text(std::size_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

// "2064 buckets, 47 configurations, class d7cfe369a8b7cee5, rows verified 8192, refined" or the
// one configuration of a single pin.
std::string entry_text(const PinSummary& pin) {
  if (!pin.bucketed) return "one configuration for every M: " + pin.configurations.front();
  std::string text = count_text(pin.buckets, "bucket") + ", " +
                     count_text(pin.configurations.size(), "configuration") + ", class " +
                     pin.class_fingerprint;
  if (pin.rows_verified) text += ", rows verified " + std::to_string(*pin.rows_verified);
  if (pin.refined) text += ", refined";
  return text;
}

std::map<std::string, const PinSummary*> by_key(const std::vector<PinSummary>& pins) {
  std::map<std::string, const PinSummary*> keyed;
  for (const auto& pin : pins) keyed.emplace(pin.key, &pin);
  return keyed;
}

// What changed in one key, in one line.
std::string change_text(const PinSummary& before, const PinSummary& after) {
  std::vector<std::string> parts;
  if (before.class_fingerprint != after.class_fingerprint) {
    parts.push_back("class " + (before.bucketed ? before.class_fingerprint : "none") + " -> " +
                    (after.bucketed ? after.class_fingerprint : "none"));
  } else if (after.bucketed) {
    parts.push_back("class " + after.class_fingerprint + " (same)");
  }
  if (before.buckets != after.buckets) {
    parts.push_back("buckets " + std::to_string(before.buckets) + " -> " +
                    std::to_string(after.buckets));
  } else if (after.bucketed) {
    parts.push_back(count_text(after.buckets, "bucket"));
  }
  const std::set<std::string> old_set(before.configurations.begin(), before.configurations.end());
  const std::set<std::string> new_set(after.configurations.begin(), after.configurations.end());
  std::size_t added = 0, kept = 0;
  for (const auto& config : new_set) (old_set.count(config) ? kept : added) += 1;
  const std::size_t removed = old_set.size() - kept;
  parts.push_back("configurations +" + std::to_string(added) + " -" + std::to_string(removed) +
                  " (" + std::to_string(kept) + " kept)");
  if (before.rows_verified != after.rows_verified || after.rows_verified) {
    const auto rows = [](const std::optional<std::int64_t>& r) {
      return r ? std::to_string(*r) : std::string("not recorded");
    };
    parts.push_back(before.rows_verified == after.rows_verified
                        ? "rows verified " + rows(after.rows_verified)
                        : "rows verified " + rows(before.rows_verified) + " -> " +
                              rows(after.rows_verified));
  }
  if (!before.refined && after.refined) parts.push_back("now refined");
  if (added == 0 && removed == 0 && before.buckets == after.buckets &&
      before.class_fingerprint == after.class_fingerprint) {
    parts.push_back("bucket edges or measurements changed");
  }
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text;
}

}  // namespace

std::vector<PinSummary> summarize_pins(const std::string& path) {
  std::vector<PinSummary> pins;
  for (const auto& file : pin_files(path)) {
    const nlohmann::json document = load_json_file(file);
    const JsonCursor root(document, file);
    root.expect_object();
    root.at("schema_version").as_int(1, 1);
    const JsonCursor entries = root.at("pins");
    entries.expect_array(true);
    for (const auto& pin : entries.items()) pins.push_back(summarize_entry(pin, file));
  }
  return pins;
}

std::string pins_show_text(const std::string& path, const std::vector<PinSummary>& pins,
                           const std::string& key) {
  std::ostringstream out;
  std::size_t shown = 0;
  for (const auto& pin : pins) {
    if (!key.empty() && pin.key != key) continue;
    out << pin.key << ": " << entry_text(pin) << "\n";
    ++shown;
  }
  if (!key.empty() && shown == 0) {
    throw BadInput(path, "$.pins", "an entry with the key " + key);
  }
  std::size_t bucketed = 0;
  for (const auto& pin : pins) bucketed += pin.bucketed ? 1 : 0;
  return path + ": " + count_text(pins.size(), "key") + " (" + std::to_string(bucketed) +
         " bucketed)\n" + out.str();
}

std::string pins_diff_text(const std::string& before_path, const std::vector<PinSummary>& before,
                           const std::string& after_path, const std::vector<PinSummary>& after) {
  const auto old_keys = by_key(before);
  const auto new_keys = by_key(after);
  std::ostringstream out;
  out << before_path << " -> " << after_path << ": " << count_text(before.size(), "key") << " -> "
      << after.size() << "\n";
  std::size_t unchanged = 0;
  for (const auto& [key, pin] : new_keys) {
    auto old = old_keys.find(key);
    if (old == old_keys.end()) {
      out << "added   " << key << ": " << entry_text(*pin) << "\n";
    } else if (old->second->entry == pin->entry) {
      ++unchanged;
    } else {
      out << "changed " << key << ": " << change_text(*old->second, *pin) << "\n";
    }
  }
  for (const auto& [key, pin] : old_keys) {
    if (!new_keys.count(key)) out << "removed " << key << ": " << entry_text(*pin) << "\n";
  }
  out << count_text(unchanged, "key") << " unchanged\n";
  return out.str();
}

}  // namespace bitcheck
