// `bitcheck algos --refine`, host side: the choice per piece, the refined pin entry, the M values
// to verify, reports and the command. The measurements come from the CUDA backend.
#include "tuner/refine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "report/report.h"
#include "sweep/sweep.h"
#include "tuner/search.h"

namespace bitcheck {
namespace {

// Pin-file configurations select the same kernel: every field but workspace_bytes and the words.
bool same_kernel(const nlohmann::json& a, const nlohmann::json& b) {
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (it.key() == "workspace_bytes" || it.key() == "describe") continue;
    if (!b.contains(it.key()) || b.at(it.key()) != it.value()) return false;
  }
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (it.key() != "workspace_bytes" && it.key() != "describe" && !a.contains(it.key()))
      return false;
  }
  return true;
}

const nlohmann::json& table_config(const RefineMeasurements& m, const RefinePiece& piece) {
  return m.base_entry.at("buckets").at(piece.bucket).at("config");
}

const nlohmann::json& chosen_config(const RefineMeasurements& m, const RefinePiece& piece) {
  if (!piece.searched_config.is_null()) return piece.searched_config;
  return piece_takes_heuristic(piece) ? m.segments.at(*piece.segment).config
                                      : table_config(m, piece);
}

std::string describe(const nlohmann::json& config) {
  return config.value("describe", std::string("?"));
}

std::string range_text(std::int64_t low, std::int64_t high) {
  return "[" + std::to_string(low) + "," +
         (high == 0 ? std::string("inf)") : std::to_string(high) + "]");
}

// Worst (lowest) heuristic-pick-over-table speed of a timed piece: table time / pick time.
double worst_table_speed(const RefinePiece& piece) {
  double worst = 0;
  for (std::size_t i = 0; i < piece.timed_rows.size(); ++i) {
    const double speed = piece.heuristic_us[i] / piece.table_us[i];  // table's speed vs the pick
    worst = i == 0 ? speed : std::min(worst, speed);
  }
  return worst;
}

std::string shape_text(const RefineRequest& r) {
  return r.form + " " + r.dtype + " N=" + std::to_string(r.n) + " K=" + std::to_string(r.k);
}

struct Counts {
  std::size_t taken = 0, kept_timed = 0, searched = 0;
  std::map<PieceStatus, std::size_t> by_status;
  std::int64_t rows_taken = 0;  // M values (up to the scan) that run the heuristic's pick now
};

Counts count(const RefineMeasurements& m) {
  Counts c;
  for (const RefinePiece& piece : m.pieces) {
    ++c.by_status[piece.status];
    if (piece_takes_heuristic(piece)) {
      ++c.taken;
      c.rows_taken += piece.max_rows - piece.min_rows + 1;
    } else if (piece.status == PieceStatus::timed) {
      ++c.kept_timed;
    }
    if (!piece.searched_config.is_null()) ++c.searched;
  }
  return c;
}

}  // namespace

std::string to_string(PieceStatus status) {
  switch (status) {
    case PieceStatus::same:
      return "same";
    case PieceStatus::splits_k:
      return "splits_k";
    case PieceStatus::other_bits:
      return "other_bits";
    case PieceStatus::rejected:
      return "rejected";
    case PieceStatus::timed:
      return "timed";
    case PieceStatus::not_timed:
      return "not_timed";
    case PieceStatus::past_scan:
      return "past_scan";
  }
  return "unknown";
}

bool piece_takes_heuristic(const RefinePiece& piece) {
  if (piece.status == PieceStatus::not_timed) return true;
  if (piece.status != PieceStatus::timed || piece.timed_rows.empty()) return false;
  if (piece.table_us.size() != piece.timed_rows.size() ||
      piece.heuristic_us.size() != piece.timed_rows.size()) {
    return false;
  }
  for (std::size_t i = 0; i < piece.timed_rows.size(); ++i) {
    if (piece.heuristic_us[i] < kKeepMargin * piece.table_us[i]) return true;
  }
  return false;
}

nlohmann::json refined_pin_entry(const RefineMeasurements& m) {
  nlohmann::json buckets = nlohmann::json::array();
  std::int64_t next = 1;
  for (const RefinePiece& piece : m.pieces) {
    if (piece.min_rows != next) {
      throw std::logic_error("refined_pin_entry: piece " +
                             range_text(piece.min_rows, piece.max_rows) +
                             " does not start at M=" + std::to_string(next));
    }
    const nlohmann::json& config = chosen_config(m, piece);
    if (!buckets.empty() && same_kernel(buckets.back()["config"], config)) {
      nlohmann::json& last = buckets.back();
      const auto workspace = std::max(last["config"].value("workspace_bytes", std::int64_t(0)),
                                      config.value("workspace_bytes", std::int64_t(0)));
      if (workspace != last["config"].value("workspace_bytes", std::int64_t(0))) {
        last["config"] = config;
        last["config"]["workspace_bytes"] = workspace;
        std::string words = describe(config);
        const auto at = words.rfind(" workspace=");
        if (at != std::string::npos)
          words = words.substr(0, at) + " workspace=" + std::to_string(workspace);
        last["config"]["describe"] = words;
      }
      if (piece.max_rows) {
        last["max_rows"] = piece.max_rows;
      } else {
        last.erase("max_rows");
      }
    } else {
      nlohmann::json bucket = {{"min_rows", piece.min_rows}, {"config", config}};
      if (piece.max_rows) bucket["max_rows"] = piece.max_rows;
      buckets.push_back(bucket);
    }
    if (piece.max_rows == 0) {
      next = 0;
      break;
    }
    next = piece.max_rows + 1;
  }
  if (next != 0)
    throw std::logic_error("refined_pin_entry: the pieces end at M=" + std::to_string(next - 1));
  const Counts c = count(m);
  nlohmann::json entry = m.base_entry;
  entry["buckets"] = buckets;
  entry["bit_class"]["refined"] = {
      {"method",
       "bitcheck algos --refine: where the heuristic's own pick is split-K 1 and gives the table's "
       "bits at both ends of its M segment, it replaces the table's configuration unless that was "
       "timed 3 % faster at every timed M; the result verified row for row against the table "
       "at every M up to " +
           std::to_string(m.request.verify_all_rows) + " and at both edges of every bucket"},
      {"scan_rows", m.request.scan_rows},
      {"heuristic_segments", m.segments.size()},
      {"pieces_taken", c.taken},
      {"split_k_pieces_searched", c.searched},
      {"base_buckets", m.base_entry.at("buckets").size()}};
  return entry;
}

std::vector<std::int64_t> verification_rows(const RefineMeasurements& m,
                                            const nlohmann::json& entry) {
  std::set<std::int64_t> rows;
  const std::int64_t scan = m.request.scan_rows;
  for (std::int64_t r = 1; r <= std::min(m.request.verify_all_rows, scan); ++r) rows.insert(r);
  for (const auto& bucket : entry.at("buckets")) {
    const std::int64_t low = bucket.at("min_rows").get<std::int64_t>();
    if (low <= scan) rows.insert(low);
    const std::int64_t high = bucket.value("max_rows", std::int64_t(0));
    if (high != 0 && high <= scan) rows.insert(high);
  }
  rows.insert(scan);
  return {rows.begin(), rows.end()};
}

namespace {

// Every configuration a report names, once, by index: the table's and the heuristic's.
struct ConfigIndex {
  std::vector<std::string> names;
  std::map<std::string, std::size_t> index;
  std::size_t operator()(const std::string& name) {
    auto found = index.find(name);
    if (found != index.end()) return found->second;
    names.push_back(name);
    return index[name] = names.size() - 1;
  }
};

bool listed_in_markdown(const RefinePiece& piece) {
  // Pieces that took the pick untimed are the library default itself there: counted, not listed.
  return piece.status != PieceStatus::same && piece.status != PieceStatus::not_timed &&
         piece.status != PieceStatus::past_scan;
}

}  // namespace

nlohmann::json refine_report_json(const RefineMeasurements& m, const nlohmann::json& refined,
                                  const PinVerification& check) {
  const RefineRequest& r = m.request;
  nlohmann::json report =
      algos_report_head("bitcheck algos --refine", r.dtype, r.form, r.n, r.k, m.device, r.seed);
  report["scan_rows"] = r.scan_rows;
  report["scan_seconds"] = m.scan_seconds;
  report["seconds"] = m.seconds;
  report["base_pin_file"] = r.base_pin_file;
  report["base_buckets"] = m.base_entry.at("buckets").size();
  report["notes"] = m.notes;
  ConfigIndex configs;
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& s : m.segments) {
    segments.push_back({s.min_rows, s.max_rows, configs(s.describe)});
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (const RefinePiece& piece : m.pieces) {
    nlohmann::json j = {{"rows", {piece.min_rows, piece.max_rows}},
                        {"status", to_string(piece.status)},
                        {"table", configs(describe(table_config(m, piece)))},
                        {"takes_heuristic", piece_takes_heuristic(piece)}};
    if (piece.segment) j["heuristic"] = configs(m.segments[*piece.segment].describe);
    if (!piece.detail.empty() && piece.status != PieceStatus::not_timed) j["detail"] = piece.detail;
    if (!piece.timed_rows.empty()) {
      nlohmann::json timings = nlohmann::json::array();
      for (std::size_t i = 0; i < piece.timed_rows.size(); ++i) {
        nlohmann::json t = {piece.timed_rows[i], piece.table_us[i], piece.heuristic_us[i]};
        if (i < piece.searched_us.size()) t.push_back(piece.searched_us[i]);
        timings.push_back(t);
      }
      j["timings"] = timings;
    }
    if (piece.searched_candidates > 0) j["searched_candidates"] = piece.searched_candidates;
    if (!piece.searched_describe.empty()) j["searched"] = configs(piece.searched_describe);
    pieces.push_back(j);
  }
  report["legend"] = {
      {"configs", "every configuration named in heuristic_segments and pieces, by index"},
      {"heuristic_segments",
       "[min_rows, max_rows, config]: the heuristic's pick over that M range"},
      {"pieces",
       "rows [min, max] (max 0: unbounded); table, heuristic and searched: config indices; "
       "timings: [M, table_us, heuristic_us] and, where the heuristic splits K, the fastest "
       "in-class listed configuration's us"}};
  report["configs"] = configs.names;
  report["heuristic_segments"] = segments;
  report["pieces"] = pieces;
  report["verification"] = {{"rows_run", check.rows.size()},
                            {"largest_rows", check.rows.empty() ? 0 : check.rows.back()},
                            {"rows_compared", check.rows_compared},
                            {"seconds", check.seconds},
                            {"passed", !check.mismatch.has_value()}};
  if (check.mismatch) report["verification"]["mismatch"] = *check.mismatch;
  report["refined"] = {{"buckets", refined.at("buckets").size()}};
  return report;
}

std::string refine_report_markdown(const RefineMeasurements& m, const nlohmann::json& refined,
                                   const PinVerification& check) {
  const RefineRequest& r = m.request;
  const Counts c = count(m);
  std::ostringstream md;
  md << "# bitcheck algos --refine: " << shape_text(r) << "\n\n";
  md << "- device: " << m.device.value("gpu_name", std::string("?")) << " ("
     << m.device.value("arch", std::string("?")) << "), cuBLASLt "
     << m.device.value("cublaslt_version", 0) << "; " << printf_number("%.1f", m.seconds) << " s ("
     << printf_number("%.1f", m.scan_seconds) << " s of heuristic queries)\n";
  md << "- base: the bucketed pin in `" << r.base_pin_file << "`, "
     << m.base_entry.at("buckets").size() << " buckets\n";
  md << "- the heuristic asked at every M from 1 to " << r.scan_rows << ": " << m.segments.size()
     << " segments of one kernel; cut with the table's buckets: " << m.pieces.size() << " pieces\n";
  md << "- a piece takes the heuristic's pick when it is split-K 1 and gives the table's bits at "
        "both ends of its segment (every row, same X rows), unless the table's configuration was "
        "3 % faster at every timed M of the piece (its ends and its geometric middle; each "
        "side timed twice, interleaved, the faster counts); pieces left untimed by the budget take "
        "the pick, which is the library default itself at those M\n";
  md << "- pieces: " << c.taken << " take the heuristic's pick (" << c.rows_taken
     << " of the scanned M), " << c.kept_timed << " timed and kept";
  for (const auto& [status, n] : c.by_status) {
    if (status != PieceStatus::timed) md << ", " << n << " " << to_string(status);
  }
  md << "\n- pieces where the heuristic splits K: " << c.searched
     << " run a faster split-K-1 configuration of the class that cuBLASLt lists at their M"
     << " (up to " << r.split_k_candidates << " tried per piece)";
  md << "\n- refined table: " << refined.at("buckets").size() << " buckets\n";
  md << "- verification: " << check.rows.size() << " M values (every M up to "
     << std::min(r.verify_all_rows, r.scan_rows)
     << ", both edges of every bucket, M = " << r.scan_rows << "), " << check.rows_compared
     << " output rows compared with the base table's at M = "
     << (check.rows.empty() ? 0 : check.rows.back()) << ": "
     << (check.mismatch ? "**FAILED**: " + *check.mismatch : std::string("all identical")) << " ("
     << printf_number("%.1f", check.seconds) << " s)\n";
  for (const auto& note : m.notes) md << "- note: " << note << "\n";
  double worst = 0;
  bool any = false;
  for (const RefinePiece& piece : m.pieces) {
    if (piece.status != PieceStatus::timed || piece_takes_heuristic(piece)) continue;
    worst = any ? std::min(worst, worst_table_speed(piece)) : worst_table_speed(piece);
    any = true;
  }
  if (any) {
    md << "- where the table stayed after timing, its worst speed against the heuristic's pick: "
       << printf_number("%.3fx", worst) << "\n";
  }
  ConfigIndex configs;
  std::ostringstream rows;
  for (const RefinePiece& piece : m.pieces) {
    if (!listed_in_markdown(piece)) continue;
    const bool searched = !piece.searched_config.is_null();
    rows << "| " << range_text(piece.min_rows, piece.max_rows) << " | "
         << (piece_takes_heuristic(piece) ? "**pick**"
             : searched                   ? "splits_k, **searched**"
                                          : to_string(piece.status))
         << " | ";
    for (std::size_t i = 0; i < piece.timed_rows.size(); ++i) {
      // Where a listed configuration was searched: its speed against the heuristic's (split-K)
      // pick and the table's, else the table's against the pick.
      const double chosen_us =
          i < piece.searched_us.size() && searched ? piece.searched_us[i] : piece.table_us[i];
      rows << (i ? " " : "") << piece.timed_rows[i] << ":"
           << printf_number("%.3f", piece.heuristic_us[i] / chosen_us);
    }
    rows << " | c" << configs(describe(table_config(m, piece))) << " | "
         << (piece.segment ? "c" + std::to_string(configs(m.segments[*piece.segment].describe))
                           : std::string("-"))
         << " | " << (searched ? "c" + std::to_string(configs(piece.searched_describe)) : "")
         << " | " << piece.detail << " |\n";
  }
  md << "\n## Pieces timed or left to the table\n\n"
        "Pieces where the table already runs the heuristic's pick (`same`) or that took it "
        "untimed are counted above, not listed. Speed: heuristic time / time of the configuration "
        "the piece runs now, at each timed M (the table's, or where the heuristic splits K and a "
        "listed split-K-1 configuration of the class beat the table by 3 %, that one).\n\n"
        "| M | status | speed per timed M | table | heuristic's pick | searched | detail |\n"
        "|---|---|---|---|---|---|---|\n"
     << rows.str();
  md << "\n## Configurations\n\n| | configuration |\n|---|---|\n";
  for (std::size_t i = 0; i < configs.names.size(); ++i)
    md << "| c" << i << " | " << configs.names[i] << " |\n";
  return md.str();
}

int run_algos_refine(const RefineOptions& options) {
  const RefineRequest& r = options.request;
  const std::string where = "command line";
  if (r.dtype != "bf16" && r.dtype != "fp16" && r.dtype != "fp32")
    throw BadInput(where, "--dtype", "bf16, fp16 or fp32, got \"" + r.dtype + "\"");
  if (r.form != "forward" && r.form != "input_grad")
    throw BadInput(where, "--form", "forward or input_grad, got \"" + r.form + "\"");
  if (r.n < 1) throw BadInput(where, "--n", "a positive integer, got " + std::to_string(r.n));
  if (r.k < 1) throw BadInput(where, "--k", "a positive integer, got " + std::to_string(r.k));
  if (r.scan_rows < 1 || r.scan_rows > 65536)
    throw BadInput(where, "--scan-rows", "1 to 65536, got " + std::to_string(r.scan_rows));
  if (r.verify_all_rows < 1)
    throw BadInput(where, "--verify-all-rows",
                   "at least 1, got " + std::to_string(r.verify_all_rows));
  if (!(r.budget_seconds > 0))
    throw BadInput(where, "--budget-seconds", "a positive number of seconds");
  if (r.repeats < 1) throw BadInput(where, "--repeats", "at least 1");
  if (r.warmup < 0) throw BadInput(where, "--warmup", "0 or more");
  if (!std::filesystem::exists(r.base_pin_file))
    throw BadInput(r.base_pin_file, "(file)", "an existing pin file to refine");

  const RefineMeasurements m = measure_cublaslt_refine(r);
  const nlohmann::json refined = refined_pin_entry(m);
  const PinVerification check =
      verify_cublaslt_pin(r, refined, m.base_entry, verification_rows(m, refined));
  const Counts c = count(m);
  std::cout << "bitcheck algos --refine: " << shape_text(r) << ": " << m.segments.size()
            << " heuristic segments up to M=" << r.scan_rows << " ("
            << printf_number("%.1f", m.scan_seconds) << " s), " << m.pieces.size() << " pieces, "
            << c.taken << " take the heuristic's pick; " << m.base_entry.at("buckets").size()
            << " -> " << refined.at("buckets").size() << " buckets\n";
  for (const auto& note : m.notes) std::cout << "  note: " << note << "\n";
  std::cout << "  verification: " << check.rows.size() << " M values, " << check.rows_compared
            << " rows: "
            << (check.mismatch ? "FAILED: " + *check.mismatch : std::string("identical")) << "\n";

  if (!options.out_dir.empty()) {
    const std::string stem = "algos-refine-" + r.dtype + "-" + r.form + "-N" + std::to_string(r.n) +
                             "-K" + std::to_string(r.k);
    write_algos_report_files(options.out_dir, stem, refine_report_json(m, refined, check),
                             refine_report_markdown(m, refined, check), options.environment,
                             options.argv);
  }
  if (check.mismatch) return exit_findings;
  if (!options.pin_file.empty()) {
    merge_cublaslt_pin(options.pin_file, refined);
    std::cout << "merged the refined table into " << options.pin_file << "\n";
  }
  return exit_pass;
}

}  // namespace bitcheck
