// Path coverage of a report: for each impl's declared launch paths, the cases that ran them and
// the cases where a compared layout ran different paths from the reference layout and the bits
// still matched (a switch point crossed safely), from the report's "paths" entries and its
// "paths_declared" table.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/paths.h"
#include "run/runner.h"

namespace bitcheck {

nlohmann::json path_decl_to_json(const PathDecl& decl);
PathDecl path_decl_from_json(const nlohmann::json& j);
// The report's "paths_declared": the declared paths of every impl that has a case in `results`,
// keyed "op/impl".
nlohmann::json declared_paths_json(const std::vector<CaseResult>& results,
                                   const Registry& registry);

struct PathCoverage {
  PathDecl decl;
  std::int64_t cases_ran = 0;  // cases where some layout ran it
  // Cases where a layout ran it and the reference layout did not (or the other way round), and
  // the bits matched: the evidence that the switch to or from this path keeps the bits.
  std::int64_t cases_crossed = 0;
  // The same with bits that differed (a finding of the run, not coverage).
  std::int64_t crossings_drifted = 0;
  std::set<std::string> members;  // a family's recorded members
  std::string example_ran;        // a case id
  std::string example_crossed;    // a case id and "layout vs reference"
};

struct ImplCoverage {
  std::string op;
  std::string impl;
  std::string backend;
  bool invariant = false;  // neither a control nor a library default
  std::int64_t cases_ran = 0;
  std::vector<PathCoverage> paths;
  // Recorded names no declaration matches, with the number of cases (an impl that declares
  // several paths but recorded none shows "(unrecorded)").
  std::map<std::string, std::int64_t> undeclared;
};

struct Coverage {
  std::vector<ImplCoverage> impls;  // in report order
};

Coverage compute_coverage(const nlohmann::json& report);
// What `sweep --require-coverage` refuses: every required declared path of an invariant impl
// that ran cases but never took the path, and every undeclared path such an impl recorded.
std::vector<std::string> coverage_gaps(const Coverage& coverage);
// Paths of invariant impls that ran but were never crossed (a layout on another path with the
// bits still matching); informative: a path the batch does not select has nothing to cross.
std::vector<std::string> never_crossed(const Coverage& coverage);
nlohmann::json coverage_to_json(const Coverage& coverage);
// The report's "coverage": per "op/impl", each declared path's [cases run, cases crossed,
// crossings that drifted]; then the gaps and the paths never crossed.
nlohmann::json coverage_summary_json(const Coverage& coverage);
// The table for the terminal: per impl, each path's cases run, crossed and drifted, then the
// paths never run and never crossed. `invariant_only` leaves out controls and library defaults.
std::string render_coverage(const Coverage& coverage, bool invariant_only);

}  // namespace bitcheck
