// The pin-lookup interface (pin_lookup.h) over the process-wide pin table (pin_table.h).
#include "core/paths.h"
#include "matmul/pin_lookup.h"
#include "matmul/pin_table.h"

namespace bitcheck::cuda {

PinnedConfig::PinnedConfig(std::shared_ptr<const PinEntry> entry, std::int64_t rows)
    : entry_(std::move(entry)), rows_(rows), config_(&entry_->config_for_rows(rows)) {}

nlohmann::json PinnedConfig::record() const {
  nlohmann::json j = lt_config_to_json(*config_);
  j["source"] = entry_->source;
  if (!entry_->buckets.empty()) j.update(entry_->bucket_record(rows_));
  return j;
}

std::string PinnedConfig::bucket_member() const {
  const PinBucket* bucket = entry_->bucket_for_rows(rows_);
  if (bucket == nullptr) return "";
  return std::to_string(bucket->min_rows) + "-" +
         (bucket->max_rows == 0 ? std::string("") : std::to_string(bucket->max_rows));
}

void PinnedConfig::record_path() const {
  const std::string member = bucket_member();
  if (member.empty()) {
    bitcheck::record_path("pinned");
  } else {
    record_path_member("bucket", member);
  }
}

std::vector<std::int64_t> pin_configuration_edges(const PinKey& key, std::int64_t max_rows) {
  std::vector<std::int64_t> edges;
  const std::shared_ptr<const PinEntry> entry = PinTable::instance().find(key);
  if (!entry) return edges;
  std::string previous;
  for (const PinBucket& bucket : entry->buckets) {
    if (bucket.min_rows > max_rows) break;
    std::string config = lt_config_to_json(bucket.config).dump();
    if (!previous.empty() && config != previous) edges.push_back(bucket.min_rows);
    previous = std::move(config);
  }
  return edges;
}

std::vector<SwitchPoint> pin_switch_points(const PinKey& key, std::int64_t max_rows) {
  std::vector<SwitchPoint> points;
  for (std::int64_t rows : pin_configuration_edges(key, max_rows))
    points.push_back(
        {rows, "bucket:before " + std::to_string(rows), "bucket:from " + std::to_string(rows)});
  return points;
}

RunHook pin_table_run_hook() {
  return {[](const RunSettings& settings) {
            PinTable::instance().configure(settings.pins, settings.write_pins);
          },
          [] { PinTable::instance().write_back_if_requested(); }};
}

PinnedConfig lookup_pin(const PinKey& key, std::int64_t rows,
                        const std::function<LtConfig()>& derive) {
  return PinnedConfig(PinTable::instance().lookup(key, derive), rows);
}

}  // namespace bitcheck::cuda
