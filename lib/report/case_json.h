// The case-JSON round trip: a CaseResult as a report entry (and as the line a sweep worker sends
// back) and the same entry read back into a CaseResult, a CaseSpec or a CaseOutcome.
#pragma once
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/op.h"
#include "report/summary.h"
#include "run/runner.h"

namespace bitcheck {

nlohmann::json drift_to_json(const DriftMetrics& metrics);
// A phase profile as {"<phase>": {"seconds": s, "bytes": b}, ...}, every phase; and back.
nlohmann::json profile_to_json(const PhaseProfile& profile);
PhaseProfile profile_from_json(const JsonCursor& profile_json);
nlohmann::json accuracy_to_json(const AccuracyMetrics& metrics);

// The case as the report records it, without an op's report extension (case_entry adds it).
nlohmann::json case_to_json(const CaseResult& result);
// The report entry of a case: case_to_json plus, for an op with a report extension that ran, its
// details under the extension's key.
nlohmann::json case_entry(const CaseResult& result, const Registry& registry);

// The inverse of case_to_json: case_to_json(case_from_json(entry)) == case_to_json's entry. A
// missing or mistyped field is BadInput naming its JSON path.
CaseResult case_from_json(const JsonCursor& case_json);
// The case a report's entry describes (op, impl, dtype, pass, dims, rows, seed, layouts, repeats,
// alone rows, case index, special values).
CaseSpec case_spec_from_json(const JsonCursor& case_json);
// Case `case_id` of a report (repro and minimize): its entry in the results and the CaseSpec it
// describes. BadInput naming the report when no case has the id, or naming the entry's field when
// this build has not its op or its impl.
struct ReportCase {
  JsonCursor entry;
  CaseSpec spec;
};
ReportCase find_report_case(const JsonCursor& report, const std::string& case_id,
                            const Registry& registry);
// What a summary needs of an entry; lenient, like the reports it reads (merged shards).
CaseOutcome outcome_from_json(const nlohmann::json& case_json);

}  // namespace bitcheck
