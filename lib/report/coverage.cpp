#include "report/coverage.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace bitcheck {

nlohmann::json path_decl_to_json(const PathDecl& decl) {
  nlohmann::json j = {{"name", decl.name}, {"description", decl.description}};
  if (decl.forced()) j["forced_by"] = decl.forced_by;
  if (!decl.batch_reachable) j["batch_reachable"] = false;
  if (decl.family) j["family"] = true;
  if (!decl.required) j["required"] = false;
  return j;
}

PathDecl path_decl_from_json(const nlohmann::json& j) {
  PathDecl decl;
  decl.name = j.at("name").get<std::string>();
  decl.description = j.value("description", "");
  decl.forced_by = j.value("forced_by", "");
  decl.batch_reachable = j.value("batch_reachable", true);
  decl.family = j.value("family", false);
  decl.required = j.value("required", true);
  return decl;
}

namespace {

// Whether a case recorded a kernel sequence as a path (an impl with one path, --provenance).
bool recorded_kernel_sequences(const CaseResult& result) {
  const PathDecl family = kernel_sequence_declaration();
  for (const auto& [layout, paths] : result.paths)
    for (const auto& path : paths)
      if (family.matches(path)) return true;
  return false;
}

}  // namespace

nlohmann::json declared_paths_json(const std::vector<CaseResult>& results,
                                   const Registry& registry) {
  nlohmann::json declared = nlohmann::json::object();
  std::set<std::string> with_kernel_sequences;
  for (const auto& result : results) {
    const std::string key = result.spec.op + "/" + result.spec.impl;
    if (recorded_kernel_sequences(result)) with_kernel_sequences.insert(key);
    if (declared.contains(key)) continue;
    const Impl* impl = registry.find_impl(result.spec.op, result.spec.impl);
    if (!impl) continue;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& decl : impl->paths()) list.push_back(path_decl_to_json(decl));
    declared[key] = std::move(list);
  }
  // An impl with one declared path has the kernel-sequence family wherever its calls recorded it.
  for (const std::string& key : with_kernel_sequences)
    if (declared.contains(key))
      declared[key].push_back(path_decl_to_json(kernel_sequence_declaration()));
  return declared;
}

namespace {

std::set<std::string> path_set(const nlohmann::json& paths, const std::string& layout) {
  std::set<std::string> set;
  auto it = paths.find(layout);
  if (it != paths.end())
    for (const auto& name : *it) set.insert(name.get<std::string>());
  return set;
}

// The declaration a recorded name belongs to, or -1.
int declaration_of(const std::vector<PathCoverage>& paths, const std::string& recorded) {
  for (std::size_t i = 0; i < paths.size(); ++i)
    if (paths[i].decl.matches(recorded)) return static_cast<int>(i);
  return -1;
}

}  // namespace

Coverage compute_coverage(const nlohmann::json& report) {
  Coverage coverage;
  std::map<std::string, std::size_t> index;  // "op/impl" -> position in coverage.impls
  const nlohmann::json declared = report.value("paths_declared", nlohmann::json::object());
  for (const auto& c : report.at("results")) {
    if (c.value("verdict", "skipped") == "skipped") continue;
    const std::string op = c.at("op").get<std::string>();
    const std::string impl = c.at("impl").get<std::string>();
    const std::string key = op + "/" + impl;
    auto [it, inserted] = index.emplace(key, coverage.impls.size());
    if (inserted) {
      ImplCoverage entry;
      entry.op = op;
      entry.impl = impl;
      entry.backend = c.value("backend", "");
      entry.invariant = !c.value("control", false) && !c.value("observation", false);
      if (auto d = declared.find(key); d != declared.end())
        for (const auto& decl : *d) {
          PathCoverage path;
          path.decl = path_decl_from_json(decl);
          entry.paths.push_back(std::move(path));
        }
      coverage.impls.push_back(std::move(entry));
    }
    ImplCoverage& entry = coverage.impls[it->second];
    ++entry.cases_ran;
    const nlohmann::json paths = c.value("paths", nlohmann::json::object());
    const std::string id = c.at("id").get<std::string>();
    // Which declarations ran in this case (any layout), and undeclared names.
    std::set<int> ran;
    std::set<std::string> undeclared;
    for (const auto& [layout, names] : paths.items()) {
      for (const auto& name : names) {
        const std::string recorded = name.get<std::string>();
        const int decl = declaration_of(entry.paths, recorded);
        if (decl < 0) {
          undeclared.insert(recorded);
          continue;
        }
        ran.insert(decl);
        if (entry.paths[decl].decl.family) entry.paths[decl].members.insert(recorded);
      }
    }
    for (int decl : ran) {
      if (entry.paths[decl].cases_ran++ == 0) entry.paths[decl].example_ran = id;
    }
    for (const auto& name : undeclared) ++entry.undeclared[name];
    // Crossings: each compared layout against the reference layout (the first one run, a
    // canonical one); a recorded name on one side only was crossed.
    const std::vector<std::string> layouts = c.value("layouts_run", std::vector<std::string>{});
    if (layouts.size() < 2) continue;
    const std::string& reference = layouts.front();
    const std::set<std::string> reference_paths = path_set(paths, reference);
    std::set<std::string> drifted_layouts;
    for (const auto& d : c.value("drift", nlohmann::json::array()))
      drifted_layouts.insert(d.value("layout", ""));
    std::map<int, std::string> crossed, crossed_drifted;  // declaration -> "layout vs reference"
    for (std::size_t i = 1; i < layouts.size(); ++i) {
      const std::set<std::string> own = path_set(paths, layouts[i]);
      if (own == reference_paths) continue;
      std::vector<std::string> differing;
      std::set_symmetric_difference(own.begin(), own.end(), reference_paths.begin(),
                                    reference_paths.end(), std::back_inserter(differing));
      const bool drifted = drifted_layouts.count(layouts[i]) > 0;
      for (const auto& name : differing) {
        const int decl = declaration_of(entry.paths, name);
        if (decl < 0) continue;
        (drifted ? crossed_drifted : crossed).emplace(decl, layouts[i] + " vs " + reference);
      }
    }
    for (const auto& [decl, where] : crossed) {
      if (entry.paths[decl].cases_crossed++ == 0)
        entry.paths[decl].example_crossed = id + " (" + where + ")";
    }
    for (const auto& [decl, where] : crossed_drifted) ++entry.paths[decl].crossings_drifted;
  }
  return coverage;
}

std::vector<std::string> coverage_gaps(const Coverage& coverage) {
  std::vector<std::string> gaps;
  for (const auto& entry : coverage.impls) {
    if (!entry.invariant) continue;
    const std::string key = entry.op + "/" + entry.impl;
    for (const auto& path : entry.paths) {
      if (path.decl.required && path.cases_ran == 0) {
        gaps.push_back(key + ": path " + path.decl.name + " never ran" +
                       (path.decl.forced() ? " (reached by " + path.decl.forced_by + ")" : ""));
      }
    }
    for (const auto& [name, cases] : entry.undeclared) {
      gaps.push_back(key + ": recorded an undeclared path " + name + " in " +
                     std::to_string(cases) + " case(s)");
    }
  }
  return gaps;
}

std::vector<std::string> never_crossed(const Coverage& coverage) {
  std::vector<std::string> list;
  for (const auto& entry : coverage.impls) {
    if (!entry.invariant || entry.paths.size() < 2) continue;
    for (const auto& path : entry.paths) {
      if (path.decl.required && path.cases_ran > 0 && path.cases_crossed == 0 &&
          path.decl.batch_reachable)
        list.push_back(entry.op + "/" + entry.impl + ": " + path.decl.name);
    }
  }
  return list;
}

nlohmann::json coverage_to_json(const Coverage& coverage) {
  nlohmann::json impls = nlohmann::json::array();
  for (const auto& entry : coverage.impls) {
    nlohmann::json paths = nlohmann::json::array();
    for (const auto& path : entry.paths) {
      nlohmann::json p = path_decl_to_json(path.decl);
      p["cases_ran"] = path.cases_ran;
      p["cases_crossed"] = path.cases_crossed;
      p["crossings_drifted"] = path.crossings_drifted;
      if (path.decl.family) p["members"] = path.members;
      if (!path.example_ran.empty()) p["example_ran"] = path.example_ran;
      if (!path.example_crossed.empty()) p["example_crossed"] = path.example_crossed;
      paths.push_back(std::move(p));
    }
    impls.push_back({{"op", entry.op},
                     {"impl", entry.impl},
                     {"backend", entry.backend},
                     {"invariant", entry.invariant},
                     {"cases_ran", entry.cases_ran},
                     {"paths", std::move(paths)},
                     {"undeclared", entry.undeclared}});
  }
  return {{"impls", std::move(impls)},
          {"gaps", coverage_gaps(coverage)},
          {"never_crossed", never_crossed(coverage)}};
}

nlohmann::json coverage_summary_json(const Coverage& coverage) {
  nlohmann::json impls = nlohmann::json::object();
  for (const auto& entry : coverage.impls) {
    nlohmann::json paths = nlohmann::json::object();
    for (const auto& path : entry.paths)
      paths[path.decl.name] = {path.cases_ran, path.cases_crossed, path.crossings_drifted};
    impls[entry.op + "/" + entry.impl] = std::move(paths);
  }
  return {{"paths", std::move(impls)},
          {"gaps", coverage_gaps(coverage)},
          {"never_crossed", never_crossed(coverage)}};
}

std::string render_coverage(const Coverage& coverage, bool invariant_only) {
  std::ostringstream out;
  std::size_t declared = 0, impls = 0;
  for (const auto& entry : coverage.impls) {
    if (invariant_only && !entry.invariant) continue;
    ++impls;
    declared += entry.paths.size();
    out << entry.op << "/" << entry.impl << " [" << entry.backend << "] "
        << (entry.invariant ? "claims invariance" : "control or library default") << ", "
        << entry.cases_ran << " case(s) run\n";
    std::size_t width = 4;
    for (const auto& path : entry.paths) width = std::max(width, path.decl.name.size());
    for (const auto& [name, cases] : entry.undeclared) width = std::max(width, name.size());
    out << "  " << std::left << std::setw(static_cast<int>(width)) << "path" << std::right
        << std::setw(7) << "ran" << std::setw(9) << "crossed" << std::setw(9) << "drifted"
        << "  example\n";
    for (const auto& path : entry.paths) {
      std::string name = path.decl.name;
      out << "  " << std::left << std::setw(static_cast<int>(width)) << name << std::right
          << std::setw(7) << path.cases_ran << std::setw(9) << path.cases_crossed << std::setw(9)
          << path.crossings_drifted << "  ";
      if (path.decl.family) out << path.members.size() << " member(s); ";
      if (path.decl.forced()) out << "forced by " << path.decl.forced_by << "; ";
      out << (!path.example_crossed.empty() ? path.example_crossed
              : path.example_ran.empty()    ? std::string("never ran")
                                            : path.example_ran)
          << "\n";
    }
    for (const auto& [name, cases] : entry.undeclared) {
      out << "  " << std::left << std::setw(static_cast<int>(width)) << name << std::right
          << std::setw(7) << cases << "  (undeclared)\n";
    }
  }
  const auto gaps = coverage_gaps(coverage);
  const auto uncrossed = never_crossed(coverage);
  out << "\ncoverage: " << impls << " impl(s), " << declared << " declared path(s); " << gaps.size()
      << " gap(s) of invariant impls, " << uncrossed.size() << " path(s) never crossed\n";
  for (const auto& gap : gaps) out << "  gap: " << gap << "\n";
  for (const auto& name : uncrossed) out << "  never crossed: " << name << "\n";
  return out.str();
}

}  // namespace bitcheck
