// Contract parsing and validation.
#include "spec/contract.h"

#include <initializer_list>
#include <stdexcept>

#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"

namespace bitcheck {
namespace {

const char* const embedded_contract_label = "embedded:contract/contract.json";

DTypeStatus parse_status(const JsonCursor& cursor) {
  std::string text = cursor.as_string();
  if (text == "mandatory") return DTypeStatus::mandatory;
  if (text == "reference") return DTypeStatus::reference;
  if (text == "optional") return DTypeStatus::optional;
  if (text == "out_of_scope") return DTypeStatus::out_of_scope;
  cursor.fail("one of mandatory, reference, optional, out_of_scope, got \"" + text + "\"");
}

void parse_dtypes(const JsonCursor& root, Contract& contract) {
  JsonCursor dtypes = root.at("dtypes");
  dtypes.expect_object();
  for (const auto& name : dtypes.keys()) {
    JsonCursor entry = dtypes.at(name);
    entry.allow_only({"status", "note"});
    if (name != "bf16" && name != "fp16" && name != "fp32" && name != "fp8") {
      entry.fail("a dtype bitcheck knows (bf16, fp16, fp32, fp8)");
    }
    contract.dtypes[name] = parse_status(entry.at("status"));
    contract.dtype_notes[name] = entry.at("note").as_string();
    if (name == "fp8" && contract.dtypes[name] != DTypeStatus::out_of_scope) {
      entry.at("status").fail("out_of_scope: fp8 has no impls in bitcheck");
    }
  }
  auto status = [&](const std::string& dtype) {
    auto it = contract.dtypes.find(dtype);
    return it == contract.dtypes.end() ? std::optional<DTypeStatus>() : it->second;
  };
  if (status("bf16") != DTypeStatus::mandatory) {
    throw BadInput(root.file(), "$.dtypes.bf16.status", "mandatory (bf16 is the training dtype)");
  }
  if (status("fp32") != DTypeStatus::reference) {
    throw BadInput(root.file(), "$.dtypes.fp32.status", "reference (fp32 is the reference path)");
  }
}

void parse_accumulation(const JsonCursor& root, Contract& contract) {
  JsonCursor accumulation = root.at("accumulation");
  for (const auto& dtype : accumulation.keys()) {
    if (!contract.knows_dtype(dtype)) accumulation.at(dtype).fail("a dtype listed under $.dtypes");
    contract.accumulation[dtype] = accumulation.at(dtype).as_string();
  }
  for (const char* narrow : {"bf16", "fp16"}) {
    if (!contract.knows_dtype(narrow) || contract.dtypes[narrow] == DTypeStatus::out_of_scope)
      continue;
    auto it = contract.accumulation.find(narrow);
    if (it == contract.accumulation.end() || it->second != "fp32") {
      throw BadInput(root.file(), std::string("$.accumulation.") + narrow,
                     "\"fp32\" (bf16/fp16 inputs accumulate in fp32)");
    }
  }
}

Threshold parse_threshold(const JsonCursor& row) {
  Threshold threshold;
  threshold.atol = row.at("atol").as_number();
  threshold.rtol = row.at("rtol").as_number();
  if (threshold.atol < 0) row.at("atol").fail("a non-negative number");
  if (threshold.rtol < 0) row.at("rtol").fail("a non-negative number");
  threshold.derivation = row.at("derivation").as_string();
  if (threshold.derivation.empty()) row.at("derivation").fail("a non-empty explanation");
  return threshold;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void parse_thresholds(const JsonCursor& root, const Registry& registry, Contract& contract) {
  JsonCursor thresholds = root.at("thresholds");
  for (const auto& key : thresholds.keys()) {
    JsonCursor per_dtype = thresholds.at(key);
    bool known_key = false;
    // Ops composed of others (the chain) hold each call to its own op's row and have none. A key
    // "<op key>@tp" is the row of that op's cases at tp > 1, whose ranks may round more.
    const std::string op_key = ends_with(key, tp_row_suffix)
                                   ? key.substr(0, key.size() - std::string(tp_row_suffix).size())
                                   : key;
    for (const OpDef* op : registry.ops())
      known_key = known_key || (op->tolerance_key == op_key && !op->threshold_of);
    if (!known_key)
      per_dtype.fail(
          "a registered op's tolerance key, or one with \"@tp\" after it (see `bitcheck list`; "
          "the chain has none: each of its calls is held to its own op's row)");
    for (const auto& dtype : per_dtype.keys()) {
      JsonCursor row = per_dtype.at(dtype);
      row.allow_only({"atol", "rtol", "derivation", "tensors"});
      if (!contract.knows_dtype(dtype)) row.fail("a dtype listed under $.dtypes");
      Threshold threshold = parse_threshold(row);
      if (auto tensors = row.find("tensors")) {
        for (const auto& tensor : tensors->keys()) {
          JsonCursor override_row = tensors->at(tensor);
          override_row.allow_only({"atol", "rtol", "derivation"});
          threshold.tensors[tensor] = parse_threshold(override_row);
        }
      }
      contract.thresholds[key][dtype] = threshold;
    }
  }
  // Every op needs a row for every dtype in scope: a missing row is a contract hole.
  for (const OpDef* op : registry.ops()) {
    if (op->threshold_of) continue;
    for (const auto& [dtype, status] : contract.dtypes) {
      if (status == DTypeStatus::out_of_scope) continue;
      auto op_rows = contract.thresholds.find(op->tolerance_key);
      if (op_rows == contract.thresholds.end() || !op_rows->second.count(dtype)) {
        throw BadInput(
            root.file(), "$.thresholds." + op->tolerance_key + "." + dtype,
            "a threshold row {atol, rtol, derivation} (every op needs one per in-scope dtype)");
      }
    }
  }
}

void parse_special_values(const JsonCursor& root, Contract& contract) {
  JsonCursor section = root.at("special_values");
  section.allow_only({"note", "nan", "infinity", "finite", "signed_zero"});
  SpecialValueRules& rules = contract.special_values;
  rules.note = section.at("note").as_string();
  auto choice = [&](const char* field, std::initializer_list<const char*> allowed) {
    JsonCursor cursor = section.at(field);
    std::string value = cursor.as_string();
    std::string names;
    for (const char* name : allowed) {
      if (value == name) return value;
      names += std::string(names.empty() ? "" : " or ") + "\"" + name + "\"";
    }
    cursor.fail(names + " (the rules bitcheck applies), got \"" + value + "\"");
  };
  rules.nan = choice("nan", {"match_reference_position", "never_passes"});
  rules.infinity = choice("infinity", {"match_reference_sign"});
  rules.finite = choice("finite", {"threshold"});
  rules.signed_zero = choice("signed_zero", {"equal"});
}

}  // namespace

std::string to_string(DTypeStatus status) {
  switch (status) {
    case DTypeStatus::mandatory:
      return "mandatory";
    case DTypeStatus::reference:
      return "reference";
    case DTypeStatus::optional:
      return "optional";
    case DTypeStatus::out_of_scope:
      return "out_of_scope";
  }
  return "unknown";
}

std::optional<std::string> Contract::dtype_skip_reason(const std::string& dtype) const {
  auto it = dtypes.find(dtype);
  if (it == dtypes.end()) return "dtype " + dtype + " is not in the contract";
  if (it->second != DTypeStatus::out_of_scope) return std::nullopt;
  return "dtype " + dtype + " is out of scope in the contract (" + dtype_notes.at(dtype) + ")";
}

const Threshold& Contract::threshold(const std::string& key, const std::string& dtype,
                                     const std::string& tensor) const {
  auto rows = thresholds.find(key);
  if (rows == thresholds.end() || !rows->second.count(dtype)) {
    throw std::logic_error("contract has no threshold for " + key + "/" + dtype);
  }
  const Threshold& row = rows->second.at(dtype);
  auto override_row = row.tensors.find(tensor);
  return override_row == row.tensors.end() ? row : override_row->second;
}

const Threshold& Contract::threshold_at_tp(const std::string& key, int tp, const std::string& dtype,
                                           const std::string& tensor) const {
  const std::string tp_key = key + tp_row_suffix;
  auto rows = thresholds.find(tp_key);
  if (tp > 1 && rows != thresholds.end() && rows->second.count(dtype))
    return threshold(tp_key, dtype, tensor);
  return threshold(key, dtype, tensor);
}

nlohmann::json Contract::to_json() const {
  nlohmann::json document;
  document["source"] = source;
  document["schema_version"] = schema_version;
  for (const auto& [dtype, status] : dtypes) {
    document["dtypes"][dtype] = {{"status", to_string(status)}, {"note", dtype_notes.at(dtype)}};
  }
  document["accumulation"] = accumulation;
  document["tf32"] = {{"fp32_gemm_allows_tf32", fp32_gemm_allows_tf32}, {"reason", tf32_reason}};
  document["special_values"] = {{"note", special_values.note},
                                {"nan", special_values.nan},
                                {"infinity", special_values.infinity},
                                {"finite", special_values.finite},
                                {"signed_zero", special_values.signed_zero}};
  for (const auto& [key, rows] : thresholds) {
    for (const auto& [dtype, row] : rows) {
      document["thresholds"][key][dtype] = {
          {"atol", row.atol}, {"rtol", row.rtol}, {"derivation", row.derivation}};
      for (const auto& [tensor, t] : row.tensors) {
        document["thresholds"][key][dtype]["tensors"][tensor] = {
            {"atol", t.atol}, {"rtol", t.rtol}, {"derivation", t.derivation}};
      }
    }
  }
  return document;
}

Contract parse_contract(const nlohmann::json& document, const std::string& file,
                        const Registry& registry) {
  JsonCursor root(document, file);
  root.expect_object();
  root.allow_only({"schema_version", "description", "dtypes", "accumulation", "tf32", "thresholds",
                   "special_values"});
  Contract contract;
  contract.source = file;
  contract.schema_version = static_cast<int>(root.at("schema_version").as_int(1, 1));
  parse_dtypes(root, contract);
  parse_accumulation(root, contract);
  JsonCursor tf32 = root.at("tf32");
  tf32.allow_only({"fp32_gemm_allows_tf32", "reason"});
  contract.fp32_gemm_allows_tf32 = tf32.at("fp32_gemm_allows_tf32").as_bool();
  contract.tf32_reason = tf32.at("reason").as_string();
  parse_thresholds(root, registry, contract);
  parse_special_values(root, contract);
  return contract;
}

Contract load_contract(const std::string& path, const Registry& registry) {
  return parse_contract(load_json_file(path), path, registry);
}

Contract load_embedded_contract(const Registry& registry) {
  return parse_contract(parse_json_text(embedded_contract_json(), embedded_contract_label),
                        embedded_contract_label, registry);
}

Contract load_contract_or_embedded(const std::string& path, const Registry& registry) {
  return path.empty() ? load_embedded_contract(registry) : load_contract(path, registry);
}

}  // namespace bitcheck
