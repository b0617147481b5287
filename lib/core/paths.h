// Launch paths: the named code paths an impl can take (a kernel, a tile shape, a vector body or a
// scalar tail, a pinned bucket), declared by the impl and recorded by each call, so a report says
// which paths every layout ran and whether the bits held where two layouts took different ones.
// Kept free of heavy includes: CUDA launchers (.cu host code) record paths through it.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bitcheck {

// One declared path. `name` is a dotted name ("rows.one-warp", "tile.W-as-A.176x192"); a family
// ("bucket") stands for many recorded members named "bucket:<member>" ("bucket:17-32").
struct PathDecl {
  std::string name;
  std::string description;
  // How a spec forces the path on every call (`"force_paths": [name]`), or empty when it cannot
  // be forced. A forced case reaches a path the batch reaches only at other shapes, or not at all.
  std::string forced_by;
  // false: no batch or shape selects it (a debugging fallback, a tile the automatic pick never
  // takes): only forcing reaches it, and it has no switch point to cross.
  bool batch_reachable = true;
  bool family = false;
  // false for paths shown for information only (a composite's components' paths): a sweep that
  // requires coverage does not require them.
  bool required = true;

  PathDecl() = default;
  PathDecl(std::string path_name, std::string path_description)
      : name(std::move(path_name)), description(std::move(path_description)) {}
  PathDecl& forceable(std::string how = "force_paths") {
    forced_by = std::move(how);
    return *this;
  }
  PathDecl& only_forced() {
    batch_reachable = false;
    return forceable();
  }
  PathDecl& as_family() {
    family = true;
    return *this;
  }
  PathDecl& informative() {
    required = false;
    return *this;
  }
  bool forced() const { return !forced_by.empty(); }
  // Whether a recorded path name is this declaration (the name itself, or a member of a family).
  bool matches(const std::string& recorded) const;
};

// A batch value where an impl's path changes for a shape: rows M takes `to`, M - 1 took `from`.
struct SwitchPoint {
  std::int64_t rows = 0;
  std::string from;
  std::string to;
};

// Records that the running call took `path`; a no-op outside a PathRecording (benchmarks, tests).
void record_path(const std::string& path);
// record_path("<family>:<member>").
void record_path_member(const std::string& family, const std::string& member);

// Collects the paths recorded on this thread while it lives (nested recordings: the innermost
// one collects). Not copyable.
class PathRecording {
 public:
  PathRecording();
  ~PathRecording();
  PathRecording(const PathRecording&) = delete;
  PathRecording& operator=(const PathRecording&) = delete;
  const std::set<std::string>& paths() const { return paths_; }
  void add(const std::string& path) { paths_.insert(path); }

 private:
  std::set<std::string> paths_;
  PathRecording* outer_;
};

// The path an impl declares when it does not override Impl::paths(): its only one.
inline constexpr const char* single_path_name = "main";
// What a layout ran when an impl declaring several paths recorded none (a defect of the impl).
inline constexpr const char* unrecorded_path_name = "(unrecorded)";

// The switch points of a path function over rows 1..max_rows: where path_of(M) != path_of(M-1).
template <typename PathOf>
std::vector<SwitchPoint> switch_points_of(PathOf path_of, std::int64_t max_rows) {
  std::vector<SwitchPoint> points;
  std::string previous = path_of(std::int64_t{1});
  for (std::int64_t rows = 2; rows <= max_rows; ++rows) {
    std::string current = path_of(rows);
    if (current != previous) points.push_back({rows, previous, current});
    previous = std::move(current);
  }
  return points;
}

// The switch point of a path chosen by the invocation's rows against a threshold (a control that
// splits its reduction while the rows are few): `below` under `threshold` rows, `from` at and
// above it; none when max_rows stays below the threshold.
inline std::vector<SwitchPoint> row_threshold_switch(std::int64_t threshold, const char* below,
                                                     const char* from, std::int64_t max_rows) {
  if (max_rows < threshold) return {};
  return {{threshold, below, from}};
}

}  // namespace bitcheck
