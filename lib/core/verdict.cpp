// Verdict names and severity.
#include "core/verdict.h"

namespace bitcheck {

std::string to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass:
      return "pass";
    case Verdict::drift:
      return "drift";
    case Verdict::nondeterministic:
      return "nondeterministic";
    case Verdict::inaccurate:
      return "inaccurate";
    case Verdict::error:
      return "error";
    case Verdict::skipped:
      return "skipped";
  }
  return "unknown";
}

std::optional<Verdict> parse_verdict(const std::string& name) {
  for (Verdict v : {Verdict::pass, Verdict::drift, Verdict::nondeterministic, Verdict::inaccurate,
                    Verdict::error, Verdict::skipped}) {
    if (to_string(v) == name) return v;
  }
  return std::nullopt;
}

int severity(Verdict verdict) {
  switch (verdict) {
    case Verdict::skipped:
      return 0;
    case Verdict::pass:
      return 1;
    case Verdict::inaccurate:
      return 2;
    case Verdict::drift:
      return 3;
    case Verdict::nondeterministic:
      return 4;
    case Verdict::error:
      return 5;
  }
  return 0;
}

bool is_failure(Verdict verdict) {
  return verdict != Verdict::pass && verdict != Verdict::skipped;
}

}  // namespace bitcheck
