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
// The batch layout's invocations captured into CUDA graphs and replayed (Layout::captured).
inline const char* const graph_layout = "graph";

// The generic layouts a spec runs when it names none. The graph layout is not among them: it runs
// where a spec names it (its cases need a device), and is_known_layout accepts it.
const std::vector<std::string>& known_layouts();
bool is_known_layout(const std::string& name);

}  // namespace bitcheck
