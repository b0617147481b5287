// Pin-key names and the M buckets' coverage rule (pin_format.h), in every build.
#include "matmul/pin_format.h"

#include <algorithm>

namespace bitcheck {
namespace {

std::string version_text(std::int64_t version) {
  // cuBLASLt versions are major * 10000 + minor * 100 + patch.
  std::string text = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100);
  if (version % 100 != 0) text += "." + std::to_string(version % 100);
  return text;
}

}  // namespace

std::string pin_key_name(const nlohmann::json& key) {
  std::string arch = key.at("arch").get<std::string>();
  arch.erase(std::remove(arch.begin(), arch.end(), '_'), arch.end());
  const std::string form = key.at("form").get<std::string>();
  std::string name = arch + "-lt" + version_text(key.at("cublaslt_version").get<std::int64_t>()) +
                     "-" + key.at("dtype").get<std::string>() + "-" + form + "-N" +
                     std::to_string(key.at("N").get<std::int64_t>()) + "-K" +
                     std::to_string(key.at("K").get<std::int64_t>());
  if (form == "weight_grad")
    name += "-T" + std::to_string(key.at("chunk_tokens").get<std::int64_t>());
  return name;
}

std::string RowBucket::label() const {
  return "[" + std::to_string(min_rows) + "," +
         (max_rows == 0 ? std::string("inf)") : std::to_string(max_rows) + "]");
}

std::optional<std::string> bucket_coverage_problem(const std::vector<RowBucket>& buckets) {
  if (buckets.empty()) return "no buckets";
  std::int64_t next = 1;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const RowBucket& b = buckets[i];
    if (b.min_rows != next) {
      return "bucket " + std::to_string(i) + " starts at " + std::to_string(b.min_rows) +
             ", expected " + std::to_string(next) +
             " (buckets must cover every M from 1 in order, without gaps or overlaps)";
    }
    if (b.max_rows == 0) {
      if (i + 1 != buckets.size())
        return "bucket " + std::to_string(i) + " is unbounded but is not the last";
      return std::nullopt;
    }
    if (b.max_rows < b.min_rows) return "bucket " + std::to_string(i) + " ends before it starts";
    next = b.max_rows + 1;
  }
  return "the last bucket ends at " + std::to_string(next - 1) +
         ": the last bucket must be unbounded";
}

}  // namespace bitcheck
