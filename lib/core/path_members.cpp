#include "core/path_members.h"

#include <algorithm>
#include <set>
#include <utility>

namespace bitcheck {

PathsAsMembers::PathsAsMembers(std::string family, std::vector<PathDecl> own)
    : family_(std::move(family)),
      own_(std::move(own)),
      recording_(std::make_unique<PathRecording>()) {}

PathsAsMembers::~PathsAsMembers() {
  const std::set<std::string> recorded = recording_->paths();
  recording_.reset();  // the recording around this one collects again
  for (const std::string& path : recorded) {
    const bool own = std::any_of(own_.begin(), own_.end(), [&](const PathDecl& decl) {
      return decl.name != family_ && decl.matches(path);
    });
    record_path(own ? path : family_ + ":" + path);
  }
}

}  // namespace bitcheck
