// The cost of invariance from bench results: per (op, dtype, pass, shape, impl) the geometric mean,
// worst and best of the time ratios over M.
#include "report/bench_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "core/op.h"
#include "report/report.h"

namespace bitcheck {

nlohmann::json cost_of_invariance(const nlohmann::json& results) {
  // Group by (op, dtype, pass, shape, impl), keeping the order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, nlohmann::json> groups;
  for (const auto& row : results) {
    if (!row.value("claims_invariance", false) || !row.contains("median_ms")) continue;
    double cost = 0;
    std::string versus;
    if (row.contains("ratio_to_baseline") && row["ratio_to_baseline"].get<double>() > 0) {
      cost = 1.0 / row["ratio_to_baseline"].get<double>();
      versus = row.value("baseline", std::string("library default"));
    } else if (row.contains("fraction_of_same_bytes_copy") &&
               row["fraction_of_same_bytes_copy"].get<double>() > 0) {
      cost = 1.0 / row["fraction_of_same_bytes_copy"].get<double>();
      versus = "copy of the same bytes";
    } else if (row.contains("fraction_of_copy_bandwidth") &&
               row["fraction_of_copy_bandwidth"].get<double>() > 0) {
      cost = 1.0 / row["fraction_of_copy_bandwidth"].get<double>();
      versus = "copy at full bandwidth";
    } else {
      continue;
    }
    const std::string key = row["op"].get<std::string>() + "|" + row["dtype"].get<std::string>() +
                            "|" + row["pass"].get<std::string>() + "|" + row["dims"].dump() + "|" +
                            row["impl"].get<std::string>() + "|" + versus;
    if (!groups.count(key)) {
      order.push_back(key);
      groups[key] = {{"op", row["op"]},
                     {"dtype", row["dtype"]},
                     {"pass", row["pass"]},
                     {"dims", row["dims"]},
                     {"impl", row["impl"]},
                     {"versus", versus},
                     {"per_rows", nlohmann::json::array()}};
    }
    groups[key]["per_rows"].push_back({{"rows", row["rows"]}, {"cost", cost}});
  }
  nlohmann::json table = nlohmann::json::array();
  for (const auto& key : order) {
    nlohmann::json entry = groups[key];
    double log_sum = 0, worst = 0, best = 0;
    std::int64_t worst_rows = 0;
    for (const auto& point : entry["per_rows"]) {
      const double cost = point["cost"].get<double>();
      log_sum += std::log(cost);
      if (cost > worst) {
        worst = cost;
        worst_rows = point["rows"].get<std::int64_t>();
      }
      best = best == 0 ? cost : std::min(best, cost);
    }
    entry["geomean_cost"] = std::exp(log_sum / static_cast<double>(entry["per_rows"].size()));
    entry["worst_cost"] = worst;
    entry["worst_rows"] = worst_rows;
    entry["best_cost"] = best;
    table.push_back(entry);
  }
  return table;
}

std::string render_cost_of_invariance_markdown(const nlohmann::json& cost) {
  std::ostringstream md;
  md << "## Cost of invariance\n\nTime of each invariant impl over the library default's at the "
        "same M (matmul: "
        "cublaslt-heuristic) or, for memory-bound ops, over a device copy of the same bytes: 1.00x "
        "= free, "
        "2.00x = twice the time.\n\n";
  md << "| op | dtype | pass | shape | impl | versus | geomean | worst (M) | best | per M |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& entry : cost) {
    Dims dims = entry["dims"].get<Dims>();
    md << "| " << entry["op"].get<std::string>() << " | " << entry["dtype"].get<std::string>()
       << " | " << entry["pass"].get<std::string>() << " | " << dims_string(dims) << " | "
       << entry["impl"].get<std::string>() << " | " << entry["versus"].get<std::string>() << " | "
       << printf_number("%.2fx", entry["geomean_cost"].get<double>()) << " | "
       << printf_number("%.2fx", entry["worst_cost"].get<double>()) << " ("
       << entry["worst_rows"].get<std::int64_t>() << ") | "
       << printf_number("%.2fx", entry["best_cost"].get<double>()) << " | ";
    bool first = true;
    for (const auto& point : entry["per_rows"]) {
      md << (first ? "" : " ") << point["rows"].get<std::int64_t>() << ":"
         << printf_number("%.2f", point["cost"].get<double>());
      first = false;
    }
    md << " |\n";
  }
  return md.str();
}

}  // namespace bitcheck
