// The generic layouts' names.
#include "core/layout_names.h"

#include <algorithm>

namespace bitcheck {

const std::vector<std::string>& known_layouts() {
  static const std::vector<std::string> names = {"alone",    "batch",  "shuffled",  "pad_right",
                                                 "pad_left", "ragged", "microbatch"};
  return names;
}

bool is_known_layout(const std::string& name) {
  const auto& names = known_layouts();
  return name == graph_layout || std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace bitcheck
