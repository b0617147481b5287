// The numerical contract (contract/contract.json): dtype scope, accumulation policy, the TF32
// decision and per-op, per-dtype accuracy thresholds. The harness refuses an invalid contract.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bitcheck {

class Registry;

enum class DTypeStatus { mandatory, reference, optional, out_of_scope };
std::string to_string(DTypeStatus status);

inline constexpr const char* tp_row_suffix = "@tp";

struct Threshold {
  double atol = 0.0;
  double rtol = 0.0;
  std::string derivation;
  // Per-output overrides, e.g. a token reduction (dW) whose fp32 error grows with the token count.
  std::map<std::string, Threshold> tensors;
};

// How the accuracy check treats non-finite results of cases whose inputs hold special values
// ($.special_values). Each rule is a named choice the parser validates, so the written contract
// cannot claim a rule bitcheck does not apply.
struct SpecialValueRules {
  // "match_reference_position": a reference NaN must be NaN in the output (any payload), an output
  // NaN where the reference is not NaN fails; "never_passes": NaN fails as without special values.
  std::string nan = "match_reference_position";
  std::string infinity = "match_reference_sign";  // a reference +-Inf must be the same infinity
  std::string finite = "threshold";               // finite reference values: atol + rtol * |ref|
  std::string signed_zero = "equal";              // accuracy: -0 == +0 (invariance: different bits)
  std::string note;
};

struct Contract {
  std::string source;  // file path, or "embedded:contract/contract.json"
  int schema_version = 0;
  std::map<std::string, DTypeStatus> dtypes;
  std::map<std::string, std::string> dtype_notes;
  std::map<std::string, std::string> accumulation;  // input dtype -> accumulator dtype
  bool fp32_gemm_allows_tf32 = false;
  std::string tf32_reason;
  std::map<std::string, std::map<std::string, Threshold>> thresholds;  // key -> dtype -> row
  SpecialValueRules special_values;

  bool knows_dtype(const std::string& dtype) const { return dtypes.count(dtype) > 0; }
  // Why a case in this dtype must not run (out of scope), or nullopt.
  std::optional<std::string> dtype_skip_reason(const std::string& dtype) const;
  // The row for `key`/`dtype`, or its override for `tensor` when the row has one.
  const Threshold& threshold(const std::string& key, const std::string& dtype,
                             const std::string& tensor = "") const;
  // The row of a case at `tp` ranks: "<key>@tp" when tp > 1 and the contract has one for the
  // dtype (its ranks round partial sums more often), else the op's row.
  const Threshold& threshold_at_tp(const std::string& key, int tp, const std::string& dtype,
                                   const std::string& tensor = "") const;
  nlohmann::json to_json() const;
};

// Parses and validates against the registered ops; BadInput (exit 2) on any problem.
Contract parse_contract(const nlohmann::json& document, const std::string& file,
                        const Registry& registry);
Contract load_contract(const std::string& path, const Registry& registry);
// The copy of contract/contract.json compiled into the binary (used when no --contract is given).
Contract load_embedded_contract(const Registry& registry);
// load_contract(path), or the embedded contract when `path` is empty.
Contract load_contract_or_embedded(const std::string& path, const Registry& registry);
const char* embedded_contract_json();

}  // namespace bitcheck
