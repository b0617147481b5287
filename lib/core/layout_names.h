// The generic layouts' names and the canonical ones: the vocabulary a spec is checked against
// (the layouts themselves are built by run/layout.h).
#pragma once
#include <string>
#include <vector>

namespace bitcheck {

// The canonical layout for row outputs: each selected row computed alone (batch of 1).
inline const char* const canonical_layout = "alone";
// The canonical layout for reduction outputs: all tokens in one batch, in order.
inline const char* const canonical_reduction_layout = "batch";

const std::vector<std::string>& known_layouts();
bool is_known_layout(const std::string& name);

}  // namespace bitcheck
