// Case outcomes. An impl that failed to run (`error`) is kept apart from a result that is wrong.
#pragma once
#include <optional>
#include <string>

namespace bitcheck {

enum class Verdict { pass, drift, nondeterministic, inaccurate, error, skipped };

std::string to_string(Verdict verdict);
std::optional<Verdict> parse_verdict(const std::string& name);
// Severity for aggregation: error > nondeterministic > drift > inaccurate > pass > skipped.
int severity(Verdict verdict);
bool is_failure(Verdict verdict);  // drift, nondeterministic, inaccurate, error

}  // namespace bitcheck
