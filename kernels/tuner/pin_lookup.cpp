// The pin-lookup interface (pin_lookup.h) over the process-wide pin table (pins.h).
#include "tuner/pin_lookup.h"

#include "tuner/pins.h"

namespace bitcheck::cuda {

PinnedConfig::PinnedConfig(std::shared_ptr<const PinEntry> entry, std::int64_t rows)
    : entry_(std::move(entry)), rows_(rows), config_(&entry_->config_for_rows(rows)) {}

nlohmann::json PinnedConfig::record() const {
  nlohmann::json j = lt_config_to_json(*config_);
  j["source"] = entry_->source;
  if (!entry_->buckets.empty()) j.update(entry_->bucket_record(rows_));
  return j;
}

void configure_pins(const std::string& path, bool write_back) {
  PinTable::instance().configure(path, write_back);
}

PinnedConfig lookup_pin(const PinKey& key, std::int64_t rows,
                        const std::function<LtConfig()>& derive) {
  return PinnedConfig(PinTable::instance().lookup(key, derive), rows);
}

void write_back_pins() {
  PinTable::instance().write_back_if_requested();
}

}  // namespace bitcheck::cuda
