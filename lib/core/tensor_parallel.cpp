// TP sizes, the names of layouts run at another TP size, and the divisibility of split dims.
#include "core/tensor_parallel.h"

namespace bitcheck {

bool is_valid_tp(int tp) {
  return tp == 1 || tp == 2 || tp == 4 || tp == 8;
}

std::string valid_tp_choices() {
  return "1, 2, 4 or 8";
}

std::string tp_layout_name(const std::string& layout, int tp) {
  return layout + "/tp=" + std::to_string(tp);
}

std::pair<std::string, int> parse_tp_layout_name(const std::string& name) {
  const std::size_t at = name.rfind("/tp=");
  if (at == std::string::npos) return {name, 0};
  try {
    return {name.substr(0, at), std::stoi(name.substr(at + 4))};
  } catch (const std::exception&) {
    return {name, 0};
  }
}

std::optional<std::string> TensorParallelism::split_problem(
    const std::map<std::string, std::int64_t>& dims, int tp) const {
  for (const std::string& split : split_dims) {
    for (const auto& [name, extent] : dims) {
      if (name != split || extent % tp == 0) continue;
      return "tp=" + std::to_string(tp) + " does not divide " + name + "=" +
             std::to_string(extent) + " (each rank holds 1/tp of " + name + ")";
    }
  }
  return std::nullopt;
}

std::string to_string(TensorParallelism::AcrossTp across_tp) {
  switch (across_tp) {
    case TensorParallelism::AcrossTp::claimed:
      return "claimed";
    case TensorParallelism::AcrossTp::expected_to_drift:
      return "expected to drift";
    case TensorParallelism::AcrossTp::observed:
      return "observed";
  }
  return "";
}

}  // namespace bitcheck
