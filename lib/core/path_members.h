// Paths a component records, re-recorded as members of a family of the impl that calls it: a TP
// impl's fixed-order GEMM records its tile shape, which the TP impl declares as "gemm:<tile>".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/paths.h"

namespace bitcheck {

// While it lives, collects the paths recorded on this thread; when it ends, records them again in
// the recording around it: each one a declaration of `own` matches as it is (but `family` itself),
// every other one as "<family>:<path>".
class PathsAsMembers {
 public:
  PathsAsMembers(std::string family, std::vector<PathDecl> own);
  ~PathsAsMembers();
  PathsAsMembers(const PathsAsMembers&) = delete;
  PathsAsMembers& operator=(const PathsAsMembers&) = delete;

 private:
  std::string family_;
  std::vector<PathDecl> own_;
  std::unique_ptr<PathRecording> recording_;
};

}  // namespace bitcheck
