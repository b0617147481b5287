// Layouts: the same logical rows presented as different physical batches (alone, in a batch at
// every position, shuffled, padded left/right/ragged with NaN pad slots, split into micro-batches,
// captured into a CUDA graph).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/layout_names.h"
#include "core/op.h"

namespace bitcheck {

// Rows computed alone: all rows when rows <= alone_rows, else the first, the last and a
// seed-determined sample, sorted.
std::vector<std::int64_t> select_alone_rows(const CaseSpec& spec);
// The same over `logical_rows` rows, for ops whose logical rows are not spec.rows (attention).
std::vector<std::int64_t> select_alone_rows(const CaseSpec& spec, std::int64_t logical_rows);

// Builds a layout by name. `token_granularity` aligns micro-batch boundaries for token reductions.
Layout make_layout(const std::string& name, const CaseSpec& spec,
                   const std::vector<std::int64_t>& alone_rows, std::int64_t token_granularity);

}  // namespace bitcheck
