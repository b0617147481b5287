// Layout construction. Every random choice is drawn from the case seed and the layout name, so a
// report's case id is enough to rebuild the exact same physical batches.
#include "run/layout.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/rng.h"

namespace bitcheck {
namespace {

std::vector<std::int64_t> all_rows(std::int64_t rows) {
  std::vector<std::int64_t> result(static_cast<std::size_t>(rows));
  std::iota(result.begin(), result.end(), 0);
  return result;
}

Invocation one_invocation(std::vector<std::int64_t> slot_rows) {
  Invocation invocation;
  invocation.slot_rows = std::move(slot_rows);
  return invocation;
}

std::int64_t pad_count(LayoutRandom& random, std::int64_t rows) {
  return random.uniform_int(1, std::max<std::int64_t>(3, rows / 2));
}

Layout padded(const CaseSpec& spec, LayoutRandom& random, bool left) {
  std::vector<std::int64_t> rows = all_rows(spec.rows);
  std::vector<std::int64_t> pads(static_cast<std::size_t>(pad_count(random, spec.rows)), -1);
  std::vector<std::int64_t> slots = left ? pads : rows;
  const auto& tail = left ? rows : pads;
  slots.insert(slots.end(), tail.begin(), tail.end());
  return {left ? "pad_left" : "pad_right", {one_invocation(slots)}, true};
}

// Rows grouped into sequences of random length, each padded to the longest: pad slots between
// real rows, as a padded batch of ragged sequences.
Layout ragged(const CaseSpec& spec, LayoutRandom& random) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t left = spec.rows; left > 0;) {
    std::int64_t length =
        std::min(left, random.uniform_int(1, std::max<std::int64_t>(2, spec.rows / 3 + 1)));
    lengths.push_back(length);
    left -= length;
  }
  std::int64_t longest = *std::max_element(lengths.begin(), lengths.end()) + 1;
  std::vector<std::int64_t> slots;
  std::int64_t next_row = 0;
  for (std::int64_t length : lengths) {
    for (std::int64_t i = 0; i < longest; ++i) slots.push_back(i < length ? next_row++ : -1);
  }
  return {"ragged", {one_invocation(slots)}, true};
}

Layout microbatches(const CaseSpec& spec, LayoutRandom& random, std::int64_t granularity) {
  Layout layout{"microbatch", {}, true};
  std::int64_t units = (spec.rows + granularity - 1) / granularity;
  std::int64_t pieces = std::min<std::int64_t>(units, random.uniform_int(2, 4));
  std::set<std::int64_t> cuts;
  while (static_cast<std::int64_t>(cuts.size()) + 1 < pieces) {
    cuts.insert(random.uniform_int(1, units - 1) * granularity);
  }
  cuts.insert(spec.rows);
  std::int64_t start = 0;
  for (std::int64_t end : cuts) {
    std::vector<std::int64_t> slots;
    for (std::int64_t r = start; r < std::min(end, spec.rows); ++r) slots.push_back(r);
    if (!slots.empty()) layout.invocations.push_back(one_invocation(slots));
    start = end;
  }
  return layout;
}

}  // namespace

std::vector<std::int64_t> select_alone_rows(const CaseSpec& spec) {
  return select_alone_rows(spec, spec.rows);
}

std::vector<std::int64_t> select_alone_rows(const CaseSpec& spec, std::int64_t logical_rows) {
  if (logical_rows <= spec.alone_rows) return all_rows(logical_rows);
  std::set<std::int64_t> chosen = {0, logical_rows - 1};
  LayoutRandom random(spec.seed ^ hash_name("alone_rows"));
  while (static_cast<std::int64_t>(chosen.size()) < spec.alone_rows) {
    chosen.insert(random.uniform_int(0, logical_rows - 1));
  }
  return {chosen.begin(), chosen.end()};
}

Layout make_layout(const std::string& name, const CaseSpec& spec,
                   const std::vector<std::int64_t>& alone_rows, std::int64_t token_granularity) {
  LayoutRandom random(spec.seed ^ hash_name(name) ^ static_cast<std::uint64_t>(spec.rows));
  if (name == "alone") {
    // Alone is a micro-batch of one token per invocation: a token reduction may be compared with
    // the batch only when every row is present and the impl reduces token by token.
    Layout layout{
        "alone",
        {},
        static_cast<std::int64_t>(alone_rows.size()) == spec.rows && token_granularity == 1};
    for (std::int64_t row : alone_rows) layout.invocations.push_back(one_invocation({row}));
    return layout;
  }
  if (name == "batch") return {"batch", {one_invocation(all_rows(spec.rows))}, true};
  if (name == graph_layout)
    return {graph_layout, {one_invocation(all_rows(spec.rows))}, true, true};
  if (name == "shuffled") {
    std::vector<std::int64_t> slots = all_rows(spec.rows);
    for (std::size_t i = slots.size(); i > 1; --i) {
      std::swap(slots[i - 1], slots[random.next() % i]);
    }
    return {"shuffled", {one_invocation(slots)}, false};
  }
  if (name == "pad_right") return padded(spec, random, false);
  if (name == "pad_left") return padded(spec, random, true);
  if (name == "ragged") return ragged(spec, random);
  if (name == "microbatch")
    return microbatches(spec, random, std::max<std::int64_t>(1, token_granularity));
  throw std::invalid_argument("unknown layout '" + name + "'");
}

}  // namespace bitcheck
