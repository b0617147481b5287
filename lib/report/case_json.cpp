// CaseResult <-> JSON: the report entry of a case, written and read back in one place. JSON has
// no Inf/NaN: non-finite magnitudes are written as strings, non-finite values as null.
#include "report/case_json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/special_values.h"

namespace bitcheck {
namespace {

nlohmann::json mismatch_to_json(const Mismatch& mismatch, DType dtype) {
  return {{"row", mismatch.row},
          {"column", mismatch.column},
          {"expected", mismatch.expected},
          {"actual", mismatch.actual},
          {"expected_bits", hex_bits(dtype, mismatch.expected_bits)},
          {"actual_bits", hex_bits(dtype, mismatch.actual_bits)}};
}

// A non-finite magnitude is written as a string.
nlohmann::json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}

double number_from(const JsonCursor& c) {
  if (c.node().is_number()) return c.node().get<double>();
  const std::string text = c.as_string();
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  c.fail("a number, \"nan\", \"inf\" or \"-inf\"");
}

// A float value of a mismatch: null stands for a non-finite one.
float value_from(const JsonCursor& c) {
  if (c.node().is_null()) return std::numeric_limits<float>::quiet_NaN();
  if (!c.node().is_number()) c.fail("a number or null");
  return static_cast<float>(c.node().get<double>());
}

nlohmann::json kernel_uses_to_json(const std::vector<KernelUse>& uses) {
  nlohmann::json list = nlohmann::json::array();
  for (const KernelUse& use : uses) {
    nlohmann::json entry = kernel_launch_to_json(use.launch);
    entry["calls"] = use.calls;
    list.push_back(std::move(entry));
  }
  return list;
}

std::vector<KernelUse> kernel_uses_from(const JsonCursor& c) {
  std::vector<KernelUse> uses;
  for (const JsonCursor& entry : c.items())
    uses.push_back({kernel_launch_from_json(entry), entry.at("calls").as_int(1, INT64_MAX)});
  return uses;
}

std::uint32_t bits_from(const JsonCursor& c) {
  const std::string text = c.as_string();
  std::size_t used = 0;
  unsigned long bits = 0;
  try {
    bits = std::stoul(text, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.rfind("0x", 0) != 0 || used != text.size()) c.fail("bits in hex (\"0x3f80\")");
  return static_cast<std::uint32_t>(bits);
}

std::int64_t count_from(const JsonCursor& c) {
  return c.as_int(0, INT64_MAX);
}

std::uint64_t unsigned_from(const JsonCursor& c) {
  if (!c.node().is_number_unsigned() && !c.node().is_number_integer()) c.fail("an integer");
  return c.node().get<std::uint64_t>();
}

}  // namespace

nlohmann::json profile_to_json(const PhaseProfile& profile) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < phase_count; ++i) {
    j[phase_name(static_cast<Phase>(i))] = {{"seconds", profile.phases[i].seconds},
                                            {"bytes", profile.phases[i].bytes}};
  }
  return j;
}

PhaseProfile profile_from_json(const JsonCursor& c) {
  c.expect_object();
  PhaseProfile profile;
  for (const std::string& name : c.keys()) {
    const std::optional<Phase> phase = parse_phase(name);
    JsonCursor cost = c.at(name);
    if (!phase)
      cost.fail(
          "a phase (inputs, staging, uploads, impl_calls, downloads, references, "
          "comparisons, bookkeeping, device_wait, device_comparisons)");
    cost.allow_only({"seconds", "bytes"});
    profile.add(*phase, cost.at("seconds").as_number(), unsigned_from(cost.at("bytes")));
  }
  return profile;
}

namespace {

Mismatch mismatch_from(const JsonCursor& c) {
  Mismatch mismatch;
  mismatch.row = c.at("row").as_int(INT64_MIN, INT64_MAX);
  mismatch.column = c.at("column").as_int(INT64_MIN, INT64_MAX);
  mismatch.expected = value_from(c.at("expected"));
  mismatch.actual = value_from(c.at("actual"));
  mismatch.expected_bits = bits_from(c.at("expected_bits"));
  mismatch.actual_bits = bits_from(c.at("actual_bits"));
  return mismatch;
}

DriftMetrics drift_from(const JsonCursor& c) {
  DriftMetrics metrics;
  metrics.layout = c.at("layout").as_string();
  metrics.reference_layout = c.at("reference_layout").as_string();
  metrics.tensor = c.at("tensor").as_string();
  auto dtype = parse_dtype(c.at("dtype").as_string());
  if (!dtype) c.at("dtype").fail("a dtype name");
  metrics.dtype = *dtype;
  metrics.compared = count_from(c.at("compared"));
  metrics.mismatch_count = count_from(c.at("mismatch_count"));
  metrics.rows_differing = count_from(c.at("rows_differing"));
  for (const auto& row : c.at("differing_rows").items()) {
    metrics.differing_rows.push_back(row.as_int(INT64_MIN, INT64_MAX));
  }
  metrics.max_abs_diff = number_from(c.at("max_abs_diff"));
  metrics.max_rel_diff = number_from(c.at("max_rel_diff"));
  metrics.max_ulp_distance = unsigned_from(c.at("max_ulp_distance"));
  if (auto first = c.find("first_mismatch")) metrics.first_mismatch = mismatch_from(*first);
  return metrics;
}

AccuracyMetrics accuracy_from(const JsonCursor& c) {
  AccuracyMetrics metrics;
  metrics.tensor = c.at("tensor").as_string();
  metrics.compared = count_from(c.at("compared"));
  metrics.violations = count_from(c.at("violations"));
  metrics.nan_count = count_from(c.at("nan_count"));
  metrics.nonfinite_matched = count_from(c.at("nonfinite_matched"));
  metrics.max_abs_error = number_from(c.at("max_abs_error"));
  metrics.max_rel_error = number_from(c.at("max_rel_error"));
  metrics.atol = c.at("atol").as_number();
  metrics.rtol = c.at("rtol").as_number();
  if (auto worst = c.find("worst")) {
    Mismatch mismatch;
    mismatch.row = worst->at("row").as_int(INT64_MIN, INT64_MAX);
    mismatch.column = worst->at("column").as_int(INT64_MIN, INT64_MAX);
    mismatch.expected = value_from(worst->at("reference"));
    mismatch.actual = value_from(worst->at("actual"));
    metrics.worst = mismatch;
  }
  return metrics;
}

std::vector<DriftMetrics> drift_list_from(const JsonCursor& c) {
  std::vector<DriftMetrics> list;
  for (const auto& entry : c.items()) list.push_back(drift_from(entry));
  return list;
}

}  // namespace

nlohmann::json drift_to_json(const DriftMetrics& metrics) {
  nlohmann::json j = {{"layout", metrics.layout},
                      {"reference_layout", metrics.reference_layout},
                      {"tensor", metrics.tensor},
                      {"dtype", to_string(metrics.dtype)},
                      {"compared", metrics.compared},
                      {"mismatch_count", metrics.mismatch_count},
                      {"rows_differing", metrics.rows_differing},
                      {"differing_rows", metrics.differing_rows},
                      {"max_abs_diff", number(metrics.max_abs_diff)},
                      {"max_rel_diff", number(metrics.max_rel_diff)},
                      {"max_ulp_distance", metrics.max_ulp_distance}};
  if (metrics.first_mismatch) {
    j["first_mismatch"] = mismatch_to_json(*metrics.first_mismatch, metrics.dtype);
  }
  return j;
}

nlohmann::json accuracy_to_json(const AccuracyMetrics& a) {
  nlohmann::json j = {{"tensor", a.tensor},
                      {"compared", a.compared},
                      {"violations", a.violations},
                      {"nan_count", a.nan_count},
                      {"nonfinite_matched", a.nonfinite_matched},
                      {"max_abs_error", number(a.max_abs_error)},
                      {"max_rel_error", number(a.max_rel_error)},
                      {"atol", a.atol},
                      {"rtol", a.rtol},
                      {"passed", a.passed()}};
  if (a.worst) {
    j["worst"] = {{"row", a.worst->row},
                  {"column", a.worst->column},
                  {"reference", a.worst->expected},
                  {"actual", a.worst->actual}};
  }
  return j;
}

nlohmann::json case_to_json(const CaseResult& result) {
  const CaseSpec& spec = result.spec;
  nlohmann::json j = {{"id", spec.id()},
                      {"case_index", spec.index},
                      {"op", spec.op},
                      {"impl", spec.impl},
                      {"backend", result.backend},
                      {"control", result.is_control},
                      {"dtype", spec.dtype_name},
                      {"pass", to_string(spec.pass)},
                      {"dims", spec.dims},
                      {"rows", spec.rows},
                      {"seed", spec.seed},
                      {"repeats", spec.repeats},
                      {"alone_rows", spec.alone_rows},
                      {"layouts", spec.layouts},
                      {"verdict", to_string(result.verdict)}};
  if (result.is_observation) j["observation"] = true;
  if (spec.tp > 1) j["tp"] = spec.tp;
  if (spec.ids != IdDistribution::uniform) j["ids"] = to_string(spec.ids);
  if (spec.special_values > 0) j["special_values"] = spec.special_values;
  if (!spec.forced_path.empty()) j["forced_path"] = spec.forced_path;
  if (!result.reason.empty()) j["reason"] = result.reason;
  if (result.verdict == Verdict::skipped) return j;
  if (result.is_control) j["expected_to_drift"] = result.expected_to_drift;
  if (result.drift_needs_rows > 0) j["drift_needs_rows"] = result.drift_needs_rows;
  j["layouts_run"] = result.layouts_run;
  if (!result.skipped_layouts.empty()) j["skipped_layouts"] = result.skipped_layouts;
  j["layout_comparisons"] = result.layout_comparisons;
  j["drift"] = nlohmann::json::array();
  for (const auto& d : result.drift) j["drift"].push_back(drift_to_json(d));
  j["nondeterminism"] = nlohmann::json::array();
  for (const auto& d : result.nondeterminism) j["nondeterminism"].push_back(drift_to_json(d));
  if (!result.cross_tp_drift.empty()) {
    j["cross_tp_drift"] = nlohmann::json::array();
    for (const auto& d : result.cross_tp_drift) j["cross_tp_drift"].push_back(drift_to_json(d));
  }
  j["accuracy"] = nlohmann::json::array();
  for (const auto& a : result.accuracy) j["accuracy"].push_back(accuracy_to_json(a));
  if (!result.fingerprint.empty()) j["fingerprint"] = result.fingerprint;
  if (!result.impl_config.is_null()) j["impl_config"] = result.impl_config;
  if (!result.paths.empty()) j["paths"] = result.paths;
  if (!result.kernels.empty()) {
    j["kernels"] = nlohmann::json::object();
    for (const auto& [layout, uses] : result.kernels)
      j["kernels"][layout] = kernel_uses_to_json(uses);
  }
  j["timings"] = {{"impl_seconds", result.timings.impl_seconds},
                  {"reference_seconds", result.timings.reference_seconds},
                  {"compare_seconds", result.timings.compare_seconds},
                  {"inputs_seconds", result.timings.inputs_seconds},
                  {"total_seconds", result.timings.total_seconds}};
  if (result.timings.host_peak_bytes > 0)
    j["timings"]["host_peak_bytes"] = result.timings.host_peak_bytes;
  j["timings"]["profile"] = profile_to_json(result.timings.profile);
  return j;
}

nlohmann::json case_entry(const CaseResult& result, const Registry& registry) {
  nlohmann::json j = case_to_json(result);
  const OpDef* op = registry.find_op(result.spec.op);
  if (op && op->report_extension && result.verdict != Verdict::skipped) {
    j[op->report_extension->key] = op->report_extension->details(j);
  }
  return j;
}

CaseSpec case_spec_from_json(const JsonCursor& c) {
  CaseSpec spec;
  spec.op = c.at("op").as_string();
  spec.impl = c.at("impl").as_string();
  spec.dtype_name = c.at("dtype").as_string();
  spec.dtype = parse_dtype(spec.dtype_name).value_or(DType::fp32);
  auto pass = parse_pass(c.at("pass").as_string());
  if (!pass) c.at("pass").fail("forward or backward");
  spec.pass = *pass;
  JsonCursor dims = c.at("dims");
  for (const auto& name : dims.keys()) spec.dims[name] = dims.at(name).as_int(1, INT64_MAX);
  spec.rows = c.at("rows").as_int(1, INT64_MAX);
  spec.seed = static_cast<std::uint64_t>(c.at("seed").as_int(0, INT64_MAX));
  spec.layouts = c.at("layouts").as_string_list();
  spec.repeats = static_cast<int>(c.at("repeats").as_int(2, 100));
  spec.alone_rows = c.at("alone_rows").as_int(1, INT64_MAX);
  if (auto index = c.find("case_index")) spec.index = index->as_int(0, INT64_MAX);
  if (auto ids = c.find("ids")) {
    auto distribution = parse_id_distribution(ids->as_string());
    if (!distribution) ids->fail("a token-id distribution (" + id_distribution_choices() + ")");
    spec.ids = *distribution;
  }
  if (auto special = c.find("special_values")) {
    spec.special_values = special->as_number();
    if (!(spec.special_values >= 0.0 && spec.special_values <= max_special_value_rate)) {
      special->fail("a special-value rate in [0, " +
                    special_value_rate_string(max_special_value_rate) + "]");
    }
  }
  if (auto forced = c.find("forced_path")) spec.forced_path = forced->as_string();
  if (auto tp = c.find("tp")) {
    spec.tp = static_cast<int>(tp->as_int(1, max_tensor_parallel));
    if (!is_valid_tp(spec.tp)) tp->fail("a TP size (" + valid_tp_choices() + ")");
  }
  return spec;
}

ReportCase find_report_case(const JsonCursor& report, const std::string& case_id,
                            const Registry& registry) {
  std::optional<JsonCursor> found;
  for (const auto& c : report.at("results").items()) {
    if (c.at("id").as_string() == case_id) found = c;
  }
  if (!found)
    throw BadInput(report.file(), "$.results[*].id", "a case with id \"" + case_id + "\"");
  CaseSpec spec = case_spec_from_json(*found);
  if (!registry.find_op(spec.op)) found->at("op").fail("an op this bitcheck build has");
  if (!registry.find_impl(spec.op, spec.impl))
    found->at("impl").fail("an impl this bitcheck build has");
  return {*found, std::move(spec)};
}

CaseResult case_from_json(const JsonCursor& c) {
  CaseResult result;
  result.spec = case_spec_from_json(c);
  result.backend = c.at("backend").as_string();
  result.is_control = c.at("control").as_bool();
  if (auto observation = c.find("observation")) result.is_observation = observation->as_bool();
  auto verdict = parse_verdict(c.at("verdict").as_string());
  if (!verdict) c.at("verdict").fail("a verdict");
  result.verdict = *verdict;
  if (auto reason = c.find("reason")) result.reason = reason->as_string();
  if (result.verdict == Verdict::skipped) return result;
  if (auto expected = c.find("expected_to_drift")) result.expected_to_drift = expected->as_bool();
  if (auto needs = c.find("drift_needs_rows"))
    result.drift_needs_rows = needs->as_int(2, INT64_MAX);
  for (const auto& layout : c.at("layouts_run").items()) {
    result.layouts_run.push_back(layout.as_string());
  }
  if (auto skipped = c.find("skipped_layouts")) {
    for (const auto& layout : skipped->keys())
      result.skipped_layouts[layout] = skipped->at(layout).as_string();
  }
  result.layout_comparisons = count_from(c.at("layout_comparisons"));
  result.drift = drift_list_from(c.at("drift"));
  result.nondeterminism = drift_list_from(c.at("nondeterminism"));
  if (auto across = c.find("cross_tp_drift")) result.cross_tp_drift = drift_list_from(*across);
  for (const auto& entry : c.at("accuracy").items())
    result.accuracy.push_back(accuracy_from(entry));
  if (auto fingerprint = c.find("fingerprint")) result.fingerprint = fingerprint->as_string();
  if (auto config = c.find("impl_config")) result.impl_config = config->node();
  if (auto paths = c.find("paths")) {
    for (const auto& layout : paths->keys())
      result.paths[layout] = paths->at(layout).as_string_list();
  }
  if (auto kernels = c.find("kernels")) {
    for (const auto& layout : kernels->keys())
      result.kernels[layout] = kernel_uses_from(kernels->at(layout));
  }
  JsonCursor timings = c.at("timings");
  result.timings.impl_seconds = timings.at("impl_seconds").as_number();
  result.timings.reference_seconds = timings.at("reference_seconds").as_number();
  result.timings.compare_seconds = timings.at("compare_seconds").as_number();
  result.timings.inputs_seconds = timings.at("inputs_seconds").as_number();
  result.timings.total_seconds = timings.at("total_seconds").as_number();
  if (auto peak = timings.find("host_peak_bytes"))
    result.timings.host_peak_bytes = static_cast<std::uint64_t>(peak->as_number());
  if (auto profile = timings.find("profile")) result.timings.profile = profile_from_json(*profile);
  return result;
}

CaseOutcome outcome_from_json(const nlohmann::json& c) {
  CaseOutcome o;
  o.id = c.at("id").get<std::string>();
  o.op = c.at("op").get<std::string>();
  o.impl = c.at("impl").get<std::string>();
  o.dtype = c.at("dtype").get<std::string>();
  o.pass = c.at("pass").get<std::string>();
  o.tp = c.value("tp", 1);
  o.verdict = parse_verdict(c.at("verdict").get<std::string>()).value_or(Verdict::error);
  o.control = c.value("control", false);
  o.expected_to_drift = c.value("expected_to_drift", false);
  o.observation = c.value("observation", false);
  o.rows = c.value("rows", std::int64_t{0});
  o.drift_needs_rows = c.value("drift_needs_rows", std::int64_t{0});
  return o;
}

}  // namespace bitcheck
