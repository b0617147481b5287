// Exact re-run of one report case, with an optional .npy dump of inputs, outputs and reference.
#include "sweep/repro.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_input.h"
#include "report/case_json.h"
#include "run/runner.h"
#include "spec/contract.h"

namespace bitcheck {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

std::string repro_command(const std::string& binary, const std::string& report_path,
                          const std::string& case_id, const RunSettings& run) {
  std::string command =
      binary + " repro " + shell_quote(report_path) + " --case " + shell_quote(case_id);
  if (run.pins != RunSettings{}.pins) command += " --pins " + shell_quote(run.pins);
  if (run.provenance) command += " --provenance";
  return command;
}

namespace {

void dump(const std::string& dir, const CaseArtifacts& artifacts, const CaseResult& result) {
  std::filesystem::create_directories(dir);
  nlohmann::json index = {{"case", result.spec.id()},
                          {"verdict", to_string(result.verdict)},
                          {"tensors", nlohmann::json::array()}};
  auto add = [&](const std::string& file, const std::string& role, const std::string& layout,
                 const Tensor& tensor) {
    write_npy((std::filesystem::path(dir) / file).string(), tensor);
    index["tensors"].push_back({{"file", file},
                                {"role", role},
                                {"layout", layout},
                                {"dtype", to_string(tensor.dtype())},
                                {"shape", tensor.shape()}});
  };
  for (const auto& [name, tensor] : artifacts.inputs)
    add("input." + name + ".npy", "input (logical rows)", "", tensor);
  for (const auto& [layout, outputs] : artifacts.layout_outputs) {
    for (const auto& [name, tensor] : outputs)
      add("output." + layout + "." + name + ".npy", "output (logical rows)", layout, tensor);
  }
  for (const auto& [name, tensor] : artifacts.reference)
    add("reference." + name + ".npy", "fp32 reference", "", tensor);
  index["reference_rows"] = artifacts.reference_rows;
  std::ofstream(std::filesystem::path(dir) / "index.json") << index.dump(2) << "\n";
}

}  // namespace

void write_npy(const std::string& path, const Tensor& tensor) {
  std::string shape;
  for (std::int64_t extent : tensor.shape()) shape += std::to_string(extent) + ",";
  if (tensor.shape().size() > 1) shape.pop_back();
  std::string header = std::string("{'descr': '") + (tensor.dtype() == DType::i32 ? "<i4" : "<f4") +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Magic, version 1.0, header length; the header is padded with spaces to 64-byte alignment.
  std::size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write("\x93NUMPY\x01\x00", 8);
  auto length = static_cast<std::uint16_t>(header.size());
  out.put(static_cast<char>(length & 0xff));
  out.put(static_cast<char>(length >> 8));
  out << header;
  for (std::int64_t i = 0; i < tensor.numel(); ++i) {
    if (tensor.dtype() == DType::i32) {
      std::int32_t value = tensor.get_int(i);
      out.write(reinterpret_cast<const char*>(&value), 4);
    } else {
      float value = tensor.get(i);
      out.write(reinterpret_cast<const char*>(&value), 4);
    }
  }
}

int run_repro(const ReproOptions& options, const Registry& registry) {
  nlohmann::json report = load_json_file(options.report_path);
  ReportCase found =
      find_report_case(JsonCursor(report, options.report_path), options.case_id, registry);
  const CaseSpec& spec = found.spec;
  const std::string recorded_verdict = found.entry.at("verdict").as_string();
  const std::string recorded_fingerprint =
      found.entry.find("fingerprint") ? found.entry.at("fingerprint").as_string() : "";

  start_run(registry, options.run);
  Contract contract = load_contract_or_embedded(options.contract_path, registry);
  Runner runner(registry, contract);
  CaseArtifacts artifacts;
  CaseResult result = runner.run_case(spec, options.dump_dir.empty() ? nullptr : &artifacts);

  std::ostringstream out;
  out << "case: " << spec.id() << "\n";
  out << "replay: " << repro_command(options.binary, options.report_path, spec.id(), options.run)
      << "\n";
  out << "verdict: " << to_string(result.verdict) << " (report: " << recorded_verdict << ")\n";
  for (const auto& drift : result.drift) out << "  " << drift_to_json(drift).dump() << "\n";
  for (const auto& [layout, uses] : result.kernels) {  // with --provenance
    out << "kernels " << layout << ":\n";
    for (const KernelUse& use : uses)
      out << "  " << launch_text(use.launch) << " x" << use.calls << "\n";
  }
  const OpDef* op = registry.find_op(spec.op);
  if (op->report_extension && op->report_extension->case_lines &&
      result.verdict != Verdict::skipped) {
    const nlohmann::json details = case_entry(result, registry)[op->report_extension->key];
    for (const auto& line : op->report_extension->case_lines(details))
      out << op->name << " " << line << "\n";
  }
  if (!result.reason.empty()) out << "  reason: " << result.reason << "\n";
  bool same_bits = recorded_fingerprint.empty() || recorded_fingerprint == result.fingerprint;
  out << "fingerprint: " << result.fingerprint
      << " (report: " << (recorded_fingerprint.empty() ? "none" : recorded_fingerprint) << ") -> "
      << (same_bits ? "same bits" : "DIFFERENT BITS") << "\n";
  if (!options.dump_dir.empty()) {
    dump(options.dump_dir, artifacts, result);
    out << "tensors: " << options.dump_dir << "/index.json\n";
  }
  options.printer->result(out.str());
  return same_bits && to_string(result.verdict) == recorded_verdict ? exit_pass : exit_findings;
}

}  // namespace bitcheck
