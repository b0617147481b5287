// The cost of invariance: a bench report's invariant impls over the library default (or a copy of
// the same bytes), as a table for `bitcheck bench`'s markdown and the nightly page.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace bitcheck {

// The cost of invariance from bench results (bench.json "results"): per op, dtype, pass, shape and
// invariant impl, its time over the library default's at the same M (matmul: over
// cublaslt-heuristic), or for memory-bound ops over a device copy of the same bytes; per M, and
// the geometric mean, worst and best over M. 1.0 = free, 2.0 = twice the time.
nlohmann::json cost_of_invariance(const nlohmann::json& results);
std::string render_cost_of_invariance_markdown(const nlohmann::json& cost);

}  // namespace bitcheck
