#include "core/paths.h"

namespace bitcheck {

namespace {
thread_local PathRecording* current_recording = nullptr;
}

bool PathDecl::matches(const std::string& recorded) const {
  if (!family) return recorded == name;
  return recorded.size() > name.size() && recorded.compare(0, name.size(), name) == 0 &&
         recorded[name.size()] == ':';
}

void record_path(const std::string& path) {
  if (current_recording) current_recording->add(path);
}

void record_path_member(const std::string& family, const std::string& member) {
  if (current_recording) current_recording->add(family + ":" + member);
}

PathRecording::PathRecording() : outer_(current_recording) {
  current_recording = this;
}
PathRecording::~PathRecording() {
  current_recording = outer_;
}

}  // namespace bitcheck
