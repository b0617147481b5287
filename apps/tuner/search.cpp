// `bitcheck algos`, host side: bit-classes from row fingerprints, per-bucket choice, scoring,
// reports and the pin entry. The measurements come from the CUDA backend.
#include "tuner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "report/report.h"
#include "sweep/sweep.h"

namespace bitcheck {
namespace {

std::string hex64(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The row fingerprints of a candidate's largest run: it holds every row any run computed.
const std::vector<std::uint64_t>& row_signature(const AlgoCandidate& candidate) {
  static const std::vector<std::uint64_t> none;
  return candidate.runs.empty() ? none : candidate.runs.rbegin()->second.row_fingerprints;
}

double geometric_mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double log_sum = 0;
  for (double v : values) log_sum += std::log(v);
  return std::exp(log_sum / static_cast<double>(values.size()));
}

bool contains(const std::vector<std::int64_t>& values, std::int64_t value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// Time of a candidate at M, or nullopt when it has no timing there.
std::optional<double> time_at(const AlgoCandidate& candidate, std::int64_t rows) {
  auto run = candidate.runs.find(rows);
  if (run == candidate.runs.end() || run->second.median_us <= 0) return std::nullopt;
  return run->second.median_us;
}

std::optional<double> heuristic_at(const AlgoMeasurements& m, std::int64_t rows) {
  auto found = m.heuristic_us.find(rows);
  if (found == m.heuristic_us.end() || found->second <= 0) return std::nullopt;
  return found->second;
}

std::string shape_text(const AlgoMeasurements& m) {
  return m.form + " " + m.dtype + " N=" + std::to_string(m.n) + " K=" + std::to_string(m.k);
}

// The chosen candidate for tested M in the best table.
std::optional<std::size_t> chosen_for(const ClassTable& table, std::int64_t rows) {
  for (const auto& choice : table.choices) {
    if (choice.bucket.contains(rows)) return choice.candidate;
  }
  return std::nullopt;
}

}  // namespace

// ---- buckets ----------------------------------------------------------------------------------

std::vector<RowBucket> buckets_from_rows(std::vector<std::int64_t> rows) {
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<RowBucket> buckets;
  std::int64_t next = 1;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const bool last = i + 1 == rows.size();
    buckets.push_back({next, last ? 0 : rows[i]});
    next = rows[i] + 1;
  }
  return buckets;
}

std::vector<std::int64_t> interior_rows(std::vector<std::int64_t> edges) {
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<std::int64_t> interior;
  std::int64_t low = 1;
  for (const std::int64_t high : edges) {
    if (high - low >= 2) {
      const auto middle = static_cast<std::int64_t>(
          std::llround(std::sqrt(static_cast<double>(low) * static_cast<double>(high))));
      interior.push_back(std::clamp(middle, low, high - 1));
    }
    low = high + 1;
  }
  return interior;
}

const std::vector<RowBucket>& default_row_buckets() {
  static const std::vector<RowBucket> buckets = buckets_from_rows(default_algos_rows());
  return buckets;
}

std::size_t bucket_index(const std::vector<RowBucket>& buckets, std::int64_t rows) {
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].contains(rows)) return i;
  }
  throw std::out_of_range("no bucket holds M=" + std::to_string(rows));
}

const std::vector<std::int64_t>& default_algos_rows() {
  // Powers of two and their halfway points up to 1024 (where one more tile row or wave changes the
  // best configuration most), each with M + 1 just past it, the batch sizes serving hits (3, 7,
  // 31, 100, 255, 1000), then 2048, 4096 and 8192 with their M + 1.
  static const std::vector<std::int64_t> rows = {
      1,   2,   3,   7,   16,  17,   31,   32,   33,   48,   49,   64,   65,
      96,  97,  100, 128, 129, 192,  193,  255,  256,  257,  320,  321,  384,
      385, 512, 513, 768, 769, 1000, 1024, 1025, 2048, 2049, 4096, 4097, 8192};
  return rows;
}

double algos_target(std::int64_t rows) {
  return rows >= 64 ? 0.95 : 0.8;
}

// ---- candidates and classes ------------------------------------------------------------------

std::string to_string(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::usable:
      return "usable";
    case CandidateStatus::drifts:
      return "drifts";
    case CandidateStatus::inaccurate:
      return "inaccurate";
    case CandidateStatus::failed:
      return "failed";
    case CandidateStatus::never_ran:
      return "never_ran";
  }
  return "unknown";
}

CandidateVerdict judge_candidate(const AlgoCandidate& candidate, double accuracy_limit) {
  CandidateVerdict verdict;
  if (!candidate.error.empty()) {
    verdict.status = CandidateStatus::failed;
    verdict.detail = candidate.error;
    return verdict;
  }
  if (candidate.runs.empty()) {
    verdict.detail = "cuBLASLt accepts it at no tested M";
    return verdict;
  }
  verdict.rows = candidate.runs.rbegin()->first;
  std::vector<std::uint64_t> first_bits;
  std::vector<std::int64_t> first_rows;  // the M whose run set first_bits[r]
  double worst_accuracy = 0;
  std::int64_t worst_accuracy_rows = 0;
  for (const auto& [rows, run] : candidate.runs) {
    if (static_cast<std::int64_t>(run.row_fingerprints.size()) != rows) {
      verdict.status = CandidateStatus::failed;
      verdict.detail = std::to_string(run.row_fingerprints.size()) +
                       " row fingerprints at M=" + std::to_string(rows);
      return verdict;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto row = static_cast<std::size_t>(r);
      if (row < first_bits.size()) {
        if (first_bits[row] != run.row_fingerprints[row]) {
          verdict.status = CandidateStatus::drifts;
          verdict.detail = "row " + std::to_string(r) +
                           " differs between M=" + std::to_string(first_rows[row]) +
                           " and M=" + std::to_string(rows);
          return verdict;
        }
      } else {
        first_bits.push_back(run.row_fingerprints[row]);
        first_rows.push_back(rows);
      }
    }
    if (!std::isnan(worst_accuracy) &&
        !(run.accuracy_ratio <= worst_accuracy)) {  // NaN is the worst
      worst_accuracy = run.accuracy_ratio;
      worst_accuracy_rows = rows;
    }
  }
  if (!(worst_accuracy <= accuracy_limit)) {
    verdict.status = CandidateStatus::inaccurate;
    verdict.detail = "error " + printf_number("%.3g", worst_accuracy) +
                     "x the rounding bound at M=" + std::to_string(worst_accuracy_rows) +
                     " (limit " + printf_number("%.3g", accuracy_limit) + ")";
    return verdict;
  }
  verdict.status = CandidateStatus::usable;
  return verdict;
}

std::vector<BitClass> group_bit_classes(const std::vector<AlgoCandidate>& candidates,
                                        const std::vector<CandidateVerdict>& verdicts) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (verdicts.at(i).status == CandidateStatus::usable) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return row_signature(candidates[a]).size() > row_signature(candidates[b]).size();
  });
  std::vector<BitClass> classes;
  for (const std::size_t index : order) {
    const auto& bits = row_signature(candidates[index]);
    bool joined = false;
    for (auto& bit_class : classes) {
      const auto& founder = row_signature(candidates[bit_class.founder]);
      // The founder has at least as many rows (sorted by row count): compare on this one's rows.
      if (std::equal(bits.begin(), bits.end(), founder.begin())) {
        bit_class.members.push_back(index);
        joined = true;
      }
    }
    if (joined) continue;
    BitClass bit_class;
    bit_class.founder = index;
    bit_class.members = {index};
    bit_class.rows = static_cast<std::int64_t>(bits.size());
    std::uint64_t hash = 0x5bd1e995ULL ^ bits.size();
    for (std::uint64_t value : bits) hash = mix64(hash ^ value);
    bit_class.fingerprint = hex64(hash);
    classes.push_back(bit_class);
  }
  return classes;
}

ClassTable choose_class_table(const AlgoMeasurements& measurements, const BitClass& bit_class,
                              std::size_t class_index, const std::vector<RowBucket>& buckets) {
  ClassTable table;
  table.bit_class = class_index;
  table.complete = true;
  for (const RowBucket& bucket : buckets) {
    BucketChoice choice;
    choice.bucket = bucket;
    for (std::int64_t rows : measurements.tested_rows) {
      if (bucket.contains(rows)) choice.tested_rows.push_back(rows);
    }
    // The member whose worst time over the heuristic's, across the bucket's tested M (its upper
    // edge and, with interior rows, one M inside it), is least: the target holds at every M of the
    // bucket, not on average. The geometric mean breaks ties.
    double best_worst = 0, best_mean = 0;
    // Full timings only, where any member has them at every tested M of the bucket: a short
    // estimate (one warm-up, three launches) can be lucky, and a pick made on luck is slower in
    // the benchmark. Estimates decide only a bucket where no member was fully timed.
    for (const bool full_timings_only : {true, false}) {
      for (const std::size_t member : bit_class.members) {
        const AlgoCandidate& candidate = measurements.candidates[member];
        bool eligible = !choice.tested_rows.empty();
        for (std::int64_t rows : measurements.checked_rows) {
          if (bucket.contains(rows) && !contains(candidate.accepted_rows, rows)) eligible = false;
        }
        std::vector<double> relative_times;  // candidate time / heuristic time
        for (std::int64_t rows : choice.tested_rows) {
          auto time = time_at(candidate, rows);
          auto heuristic = heuristic_at(measurements, rows);
          if (!time || !heuristic || (full_timings_only && !candidate.runs.at(rows).fully_timed)) {
            eligible = false;
            break;
          }
          relative_times.push_back(*time / *heuristic);
        }
        if (!eligible) continue;
        const double worst = *std::max_element(relative_times.begin(), relative_times.end());
        const double mean = geometric_mean(relative_times);
        if (!choice.candidate || worst < best_worst || (worst == best_worst && mean < best_mean)) {
          choice.candidate = member;
          best_worst = worst;
          best_mean = mean;
        }
      }
      if (choice.candidate) break;
    }
    if (choice.candidate) {
      choice.speed_vs_heuristic = 1.0 / best_mean;
    } else {
      table.complete = false;
    }
    // Adjacent buckets with the same configuration become one (a shorter pin table, same choice
    // for every M).
    if (!table.choices.empty() && choice.candidate &&
        table.choices.back().candidate == choice.candidate) {
      BucketChoice& previous = table.choices.back();
      previous.bucket.max_rows = choice.bucket.max_rows;
      previous.tested_rows.insert(previous.tested_rows.end(), choice.tested_rows.begin(),
                                  choice.tested_rows.end());
      std::vector<double> speeds;
      for (std::int64_t rows : previous.tested_rows) {
        speeds.push_back(*heuristic_at(measurements, rows) /
                         *time_at(measurements.candidates[*choice.candidate], rows));
      }
      previous.speed_vs_heuristic = geometric_mean(speeds);
      continue;
    }
    table.choices.push_back(choice);
  }
  std::vector<double> speeds;
  for (const auto& choice : table.choices) {
    if (!choice.candidate) continue;
    for (std::int64_t rows : choice.tested_rows) {
      const double speed = *heuristic_at(measurements, rows) /
                           *time_at(measurements.candidates[*choice.candidate], rows);
      table.speed_vs_heuristic[rows] = speed;
      speeds.push_back(speed);
    }
  }
  table.score = geometric_mean(speeds);
  return table;
}

AlgoAnalysis analyze_algos(const AlgoMeasurements& measurements,
                           const std::vector<RowBucket>& buckets) {
  AlgoAnalysis analysis;
  analysis.buckets = buckets;
  for (const auto& candidate : measurements.candidates) {
    analysis.verdicts.push_back(judge_candidate(candidate, measurements.accuracy_limit));
  }
  analysis.classes = group_bit_classes(measurements.candidates, analysis.verdicts);
  for (std::size_t c = 0; c < analysis.classes.size(); ++c) {
    analysis.tables.push_back(choose_class_table(measurements, analysis.classes[c], c, buckets));
    const ClassTable& table = analysis.tables.back();
    if (table.complete && (!analysis.best || table.score > analysis.tables[*analysis.best].score)) {
      analysis.best = c;
    }
  }
  return analysis;
}

// ---- reports ----------------------------------------------------------------------------------

namespace {

std::vector<std::size_t> classes_of(const AlgoAnalysis& analysis, std::size_t candidate) {
  std::vector<std::size_t> result;
  for (std::size_t c = 0; c < analysis.classes.size(); ++c) {
    const auto& members = analysis.classes[c].members;
    if (std::find(members.begin(), members.end(), candidate) != members.end()) result.push_back(c);
  }
  return result;
}

nlohmann::json table_json(const AlgoMeasurements& m, const ClassTable& table) {
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& choice : table.choices) {
    nlohmann::json j = {{"bucket", choice.bucket.label()},
                        {"min_rows", choice.bucket.min_rows},
                        {"tested_rows", choice.tested_rows}};
    if (choice.bucket.max_rows) j["max_rows"] = choice.bucket.max_rows;
    if (choice.candidate) {
      j["candidate"] = *choice.candidate;
      j["describe"] = m.candidates[*choice.candidate].describe;
      j["speed_vs_heuristic"] = choice.speed_vs_heuristic;
    }
    choices.push_back(j);
  }
  return choices;
}

// Per tested M of the best table: heuristic time, chosen time, speed and target.
struct BestRow {
  std::int64_t rows;
  double heuristic_us, chosen_us, speed, target;
  std::size_t candidate;
};
std::vector<BestRow> best_rows(const AlgoMeasurements& m, const AlgoAnalysis& analysis) {
  std::vector<BestRow> rows;
  if (!analysis.best) return rows;
  const ClassTable& table = analysis.tables[*analysis.best];
  for (std::int64_t M : m.tested_rows) {
    auto candidate = chosen_for(table, M);
    if (!candidate) continue;
    const double heuristic = *heuristic_at(m, M);
    const double chosen = *time_at(m.candidates[*candidate], M);
    rows.push_back({M, heuristic, chosen, heuristic / chosen, algos_target(M), *candidate});
  }
  return rows;
}

}  // namespace

nlohmann::json algos_report_head(const std::string& tool, const std::string& dtype,
                                 const std::string& form, std::int64_t n, std::int64_t k,
                                 const nlohmann::json& device, std::uint64_t seed) {
  return {{"schema_version", 1},
          {"tool", tool},
          {"shape", {{"dtype", dtype}, {"form", form}, {"N", n}, {"K", k}}},
          {"device", device},
          {"seed", seed}};
}

nlohmann::json algos_report_json(const AlgoMeasurements& m, const AlgoAnalysis& analysis) {
  nlohmann::json report =
      algos_report_head("bitcheck algos", m.dtype, m.form, m.n, m.k, m.device, m.seed);
  report["tested_rows"] = m.tested_rows;
  report["checked_rows"] = m.checked_rows;
  report["accuracy_limit"] = m.accuracy_limit;
  report["seconds"] = m.seconds;
  report["notes"] = m.notes;
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : analysis.buckets) buckets.push_back(b.label());
  report["buckets"] = buckets;
  nlohmann::json heuristic = nlohmann::json::array();
  for (std::int64_t rows : m.tested_rows) {
    nlohmann::json j = {{"rows", rows}};
    if (auto t = heuristic_at(m, rows)) j["median_us"] = *t;
    if (m.heuristic_describe.count(rows)) j["describe"] = m.heuristic_describe.at(rows);
    heuristic.push_back(j);
  }
  report["heuristic"] = heuristic;
  nlohmann::json candidates = nlohmann::json::array();
  for (std::size_t i = 0; i < m.candidates.size(); ++i) {
    const AlgoCandidate& c = m.candidates[i];
    const CandidateVerdict& v = analysis.verdicts[i];
    nlohmann::json j = {{"index", i},
                        {"describe", c.describe},
                        {"config", c.config},
                        {"origin", c.origin},
                        {"status", to_string(v.status)},
                        {"rows", v.rows},
                        {"classes", classes_of(analysis, i)}};
    if (!v.detail.empty()) j["detail"] = v.detail;
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& [rows, run] : c.runs) {
      nlohmann::json r = {
          {"rows", rows}, {"accuracy_ratio", run.accuracy_ratio}, {"fully_timed", run.fully_timed}};
      if (run.median_us > 0) {
        r["median_us"] = run.median_us;
        if (auto h = heuristic_at(m, rows)) r["speed_vs_heuristic"] = *h / run.median_us;
      }
      runs.push_back(r);
    }
    j["runs"] = runs;
    candidates.push_back(j);
  }
  report["candidates"] = candidates;
  nlohmann::json classes = nlohmann::json::array();
  for (std::size_t c = 0; c < analysis.classes.size(); ++c) {
    const BitClass& bc = analysis.classes[c];
    const ClassTable& table = analysis.tables[c];
    classes.push_back({{"index", c},
                       {"fingerprint", bc.fingerprint},
                       {"rows", bc.rows},
                       {"founder", bc.founder},
                       {"members", bc.members},
                       {"complete", table.complete},
                       {"score", table.score},
                       {"table", table_json(m, table)}});
  }
  report["classes"] = classes;
  if (analysis.best) {
    const ClassTable& table = analysis.tables[*analysis.best];
    nlohmann::json per_row = nlohmann::json::array();
    bool all_met = true;
    for (const BestRow& row : best_rows(m, analysis)) {
      const bool met = row.speed >= row.target;
      all_met = all_met && met;
      per_row.push_back({{"rows", row.rows},
                         {"heuristic_us", row.heuristic_us},
                         {"chosen_us", row.chosen_us},
                         {"speed_vs_heuristic", row.speed},
                         {"target", row.target},
                         {"meets_target", met},
                         {"candidate", row.candidate}});
    }
    report["best"] = {
        {"class", *analysis.best}, {"fingerprint", analysis.classes[*analysis.best].fingerprint},
        {"score", table.score},    {"table", table_json(m, table)},
        {"per_row", per_row},      {"targets_met", all_met}};
  } else {
    report["best"] = nullptr;
  }
  return report;
}

std::string algos_terminal_table(const AlgoMeasurements& m, const AlgoAnalysis& analysis) {
  std::ostringstream out;
  std::size_t usable = 0;
  for (const auto& v : analysis.verdicts) usable += v.status == CandidateStatus::usable;
  out << "bitcheck algos: " << shape_text(m) << ": " << m.candidates.size() << " candidates, "
      << usable << " invariant and accurate, " << analysis.classes.size() << " bit-classes ("
      << printf_number("%.1f", m.seconds) << " s)\n";
  for (const auto& note : m.notes) out << "  note: " << note << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-6s %-10s %-8s %-8s %-8s %s\n", "class", "fingerprint",
                "members", "complete", "score", "table (bucket: candidate)");
  out << line;
  for (std::size_t c = 0; c < analysis.classes.size(); ++c) {
    const ClassTable& table = analysis.tables[c];
    std::string choices;
    for (const auto& choice : table.choices) {
      choices += " " + choice.bucket.label() + ":" +
                 (choice.candidate ? "c" + std::to_string(*choice.candidate) : "-");
    }
    std::snprintf(line, sizeof line, "  %-6s %-10s %-8zu %-8s %-8s%s\n",
                  ((analysis.best && *analysis.best == c ? "*" : " ") + std::to_string(c)).c_str(),
                  analysis.classes[c].fingerprint.substr(0, 10).c_str(),
                  analysis.classes[c].members.size(), table.complete ? "yes" : "no",
                  printf_number("%.3f", table.score).c_str(), choices.c_str());
    out << line;
  }
  if (!analysis.best) {
    out << "  no bit-class has a configuration for every M bucket: no table\n";
    return out.str();
  }
  out << "  best class " << *analysis.best << " (* above), per M:\n";
  std::snprintf(line, sizeof line, "  %6s %12s %12s %8s %7s %5s  %s\n", "M", "heuristic_us",
                "chosen_us", "speed", "target", "met", "chosen configuration");
  out << line;
  for (const BestRow& row : best_rows(m, analysis)) {
    std::snprintf(line, sizeof line, "  %6lld %12.1f %12.1f %7.3fx %6.2fx %5s  c%zu %s\n",
                  static_cast<long long>(row.rows), row.heuristic_us, row.chosen_us, row.speed,
                  row.target, row.speed >= row.target ? "yes" : "NO", row.candidate,
                  m.candidates[row.candidate].describe.c_str());
    out << line;
  }
  return out.str();
}

std::string algos_report_markdown(const AlgoMeasurements& m, const AlgoAnalysis& analysis) {
  std::ostringstream md;
  md << "# bitcheck algos: " << shape_text(m) << "\n\n";
  md << "- device: " << m.device.value("gpu_name", std::string("?")) << " ("
     << m.device.value("arch", std::string("?")) << "), cuBLASLt "
     << m.device.value("cublaslt_version", 0) << "\n";
  md << "- " << m.candidates.size() << " candidates run at M = ";
  for (std::size_t i = 0; i < m.tested_rows.size(); ++i) md << (i ? ", " : "") << m.tested_rows[i];
  md << " (seed " << m.seed << ", " << printf_number("%.1f", m.seconds)
     << " s); accepted by cuBLASLt checked at " << m.checked_rows.size() << " M values up to "
     << (m.checked_rows.empty() ? 0 : m.checked_rows.back()) << "\n";
  md << "- bit-class: candidates whose output rows are bitwise identical on every row both "
        "computed, the same X rows "
        "at every M; a candidate is used only when its own rows never change with M and its error "
        "stays within "
     << printf_number("%.3g", m.accuracy_limit) << "x the rounding bound of an fp64 reference\n";
  md << "- speed: heuristic median time / chosen median time at the same M, same run (above 1 = "
        "faster)\n";
  md << "- per bucket: the member whose worst speed over the bucket's tested M (its upper edge "
        "and, "
        "where the bucket holds 3 or more M, one inside it) is highest; the speed shown is the "
        "geometric mean over those M\n";
  for (const auto& note : m.notes) md << "- note: " << note << "\n";
  md << "\n## Chosen table\n\n";
  if (!analysis.best) {
    md << "No bit-class has a configuration for every M bucket.\n";
  } else {
    const ClassTable& table = analysis.tables[*analysis.best];
    md << "Class " << *analysis.best << " (fingerprint `"
       << analysis.classes[*analysis.best].fingerprint << "`), score "
       << printf_number("%.3f", table.score) << " (geometric mean of speed over the tested M).\n\n";
    md << "| bucket | candidate | configuration | speed |\n|---|---|---|---|\n";
    for (const auto& choice : table.choices) {
      md << "| " << choice.bucket.label() << " | c" << *choice.candidate << " | "
         << m.candidates[*choice.candidate].describe << " | "
         << printf_number("%.3fx", choice.speed_vs_heuristic) << " |\n";
    }
    md << "\n| M | heuristic us | chosen us | speed | target | met | heuristic configuration |\n"
          "|---|---|---|---|---|---|---|\n";
    for (const BestRow& row : best_rows(m, analysis)) {
      md << "| " << row.rows << " | " << printf_number("%.1f", row.heuristic_us) << " | "
         << printf_number("%.1f", row.chosen_us) << " | " << printf_number("%.3fx", row.speed)
         << " | " << printf_number("%.2fx", row.target) << " | "
         << (row.speed >= row.target ? "yes" : "**no**") << " | "
         << (m.heuristic_describe.count(row.rows) ? m.heuristic_describe.at(row.rows) : "")
         << " |\n";
    }
  }
  md << "\n## Bit-classes\n\n| class | fingerprint | rows | members | complete | score "
        "|\n|---|---|---|---|---|---|\n";
  for (std::size_t c = 0; c < analysis.classes.size(); ++c) {
    const BitClass& bc = analysis.classes[c];
    md << "| " << c << " | `" << bc.fingerprint << "` | " << bc.rows << " | ";
    for (std::size_t i = 0; i < bc.members.size(); ++i)
      md << (i ? " " : "") << "c" << bc.members[i];
    md << " | " << (analysis.tables[c].complete ? "yes" : "no") << " | "
       << printf_number("%.3f", analysis.tables[c].score) << " |\n";
  }
  md << "\n## Candidates\n\n| # | status | classes | origin | configuration | speed per M | detail "
        "|\n"
        "|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < m.candidates.size(); ++i) {
    const AlgoCandidate& c = m.candidates[i];
    md << "| c" << i << " | " << to_string(analysis.verdicts[i].status) << " | ";
    auto classes = classes_of(analysis, i);
    for (std::size_t j = 0; j < classes.size(); ++j) md << (j ? " " : "") << classes[j];
    md << " | " << c.origin << " | " << c.describe << " | ";
    bool first = true;
    for (const auto& [rows, run] : c.runs) {
      auto heuristic = heuristic_at(m, rows);
      if (run.median_us <= 0 || !heuristic) continue;
      md << (first ? "" : " ") << rows << ":" << printf_number("%.2f", *heuristic / run.median_us)
         << (run.fully_timed ? "" : "~");
      first = false;
    }
    md << " | " << analysis.verdicts[i].detail << " |\n";
  }
  md << "\n`~`: a short estimate (a few launches) for a candidate that was not competitive at that "
        "M.\n";
  return md.str();
}

nlohmann::json algos_pin_entry(const AlgoMeasurements& m, const AlgoAnalysis& analysis) {
  if (!analysis.best) throw std::logic_error("algos_pin_entry: no complete table");
  const ClassTable& table = analysis.tables[*analysis.best];
  const BitClass& bit_class = analysis.classes[*analysis.best];
  nlohmann::json key = {{"arch", m.device.at("arch")},
                        {"cublaslt_version", m.device.at("cublaslt_version")},
                        {"dtype", m.dtype},
                        {"form", m.form},
                        {"N", m.n},
                        {"K", m.k}};
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& choice : table.choices) {
    nlohmann::json b = {{"min_rows", choice.bucket.min_rows},
                        {"config", m.candidates[*choice.candidate].config}};
    if (choice.bucket.max_rows) b["max_rows"] = choice.bucket.max_rows;
    buckets.push_back(b);
  }
  nlohmann::json speeds = nlohmann::json::object();
  for (const auto& [rows, speed] : table.speed_vs_heuristic) speeds[std::to_string(rows)] = speed;
  return {{"key", key},
          {"buckets", buckets},
          {"bit_class",
           {{"fingerprint", bit_class.fingerprint},
            {"rows", bit_class.rows},
            {"tested_rows", m.tested_rows},
            {"seed", m.seed},
            {"members", bit_class.members.size()},
            {"method",
             "bitcheck algos: every configuration of the table gave the same bits on every output "
             "row at "
             "every tested M (rows of X identical for every M)"}}},
          {"measured",
           {{"device", m.device.value("gpu_name", std::string("?"))},
            {"score", table.score},
            {"speed_vs_heuristic", speeds}}}};
}

// ---- the command ------------------------------------------------------------------------------

void write_algos_report_files(const std::string& out_dir, const std::string& stem,
                              nlohmann::json report, const std::string& markdown,
                              const nlohmann::json& environment,
                              const std::vector<std::string>& argv) {
  report["meta"] = environment;
  report["meta"]["argv"] = argv;
  report["meta"]["started_at"] = utc_timestamp();
  std::filesystem::create_directories(out_dir);
  const auto dir = std::filesystem::path(out_dir);
  write_file_atomically((dir / (stem + ".json")).string(), report.dump() + "\n");
  write_file_atomically((dir / (stem + ".md")).string(), markdown);
  std::cout << "wrote " << (dir / (stem + ".json")).string() << " and .md\n";
}

namespace {

void validate(const AlgosRequest& request) {
  const std::string where = "command line";
  if (request.dtype != "bf16" && request.dtype != "fp16" && request.dtype != "fp32") {
    throw BadInput(where, "--dtype", "bf16, fp16 or fp32, got \"" + request.dtype + "\"");
  }
  if (request.form != "forward" && request.form != "input_grad") {
    throw BadInput(where, "--form", "forward or input_grad, got \"" + request.form + "\"");
  }
  if (request.n < 1)
    throw BadInput(where, "--n", "a positive integer, got " + std::to_string(request.n));
  if (request.k < 1)
    throw BadInput(where, "--k", "a positive integer, got " + std::to_string(request.k));
  if (request.max_candidates < 1) throw BadInput(where, "--max-candidates", "at least 1");
  if (!(request.budget_seconds > 0))
    throw BadInput(where, "--budget-seconds", "a positive number of seconds");
  if (request.repeats < 1) throw BadInput(where, "--repeats", "at least 1");
  if (request.warmup < 0) throw BadInput(where, "--warmup", "0 or more");
  for (std::int64_t rows : request.rows) {
    if (rows < 1)
      throw BadInput(where, "--rows", "positive row counts, got " + std::to_string(rows));
  }
}

}  // namespace

int run_algos(const AlgosOptions& options) {
  AlgosRequest request = options.request;
  validate(request);
  if (request.rows.empty()) request.rows = default_algos_rows();
  std::sort(request.rows.begin(), request.rows.end());
  request.rows.erase(std::unique(request.rows.begin(), request.rows.end()), request.rows.end());
  const std::vector<std::int64_t> edges = request.rows;
  if (request.interior) {
    for (std::int64_t rows : interior_rows(edges)) request.rows.push_back(rows);
  }

  AlgoMeasurements measurements = measure_cublaslt_algos(request);
  AlgoAnalysis analysis = analyze_algos(measurements, buckets_from_rows(edges));
  std::cout << algos_terminal_table(measurements, analysis);

  if (!options.out_dir.empty()) {
    const std::string stem = "algos-" + measurements.dtype + "-" + measurements.form + "-N" +
                             std::to_string(measurements.n) + "-K" + std::to_string(measurements.k);
    write_algos_report_files(options.out_dir, stem, algos_report_json(measurements, analysis),
                             algos_report_markdown(measurements, analysis), options.environment,
                             options.argv);
  }
  if (!analysis.best) return exit_findings;
  if (!options.pin_file.empty()) {
    merge_cublaslt_pin(options.pin_file, algos_pin_entry(measurements, analysis));
    std::cout << "merged the table of class " << *analysis.best << " into " << options.pin_file
              << "\n";
  }
  return exit_pass;
}

}  // namespace bitcheck
