// Strict JSON input: BadInput with file, JSON path and expectation on any deviation.
#include "core/json_input.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace bitcheck {

nlohmann::json load_json_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw BadInput(path, "$", "a readable file (cannot open it)");
  std::stringstream buffer;
  buffer << stream.rdbuf();
  if (stream.bad()) throw BadInput(path, "$", "a readable file (read failed)");
  return parse_json_text(buffer.str(), path);
}

namespace {

// Tracks the JSON path while nlohmann's parser reads, so that an object naming the same key twice
// (which the parser would read as "last value wins") is refused with the key's full path.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(std::string file_label) : file_(std::move(file_label)) {}

  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames_.push_back({event == Event::array_start, 0, {}, "", child_path()});
        break;
      case Event::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.key).second) {
          throw BadInput(file_, frame.path + "." + frame.key,
                         "each key once per object (\"" + frame.key +
                             "\" appears twice: which value is meant is ambiguous)");
        }
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        next_element();
        break;
      case Event::value:
        next_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;
    std::set<std::string> keys;
    std::string key;
    std::string path;
  };

  std::string child_path() const {
    if (frames_.empty()) return "$";
    const Frame& parent = frames_.back();
    if (parent.array) return parent.path + "[" + std::to_string(parent.index) + "]";
    return parent.path + "." + parent.key;
  }
  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  std::string file_;
  std::vector<Frame> frames_;
};

// Where a document first nests deeper than json_max_depth, and how deep it goes: one pass over
// the text outside its strings, no allocation, so a hostile file costs no more than reading it.
struct NestingScan {
  std::int64_t deepest = 0;
  std::size_t first_too_deep = std::string::npos;  // offset of the bracket opening level limit+1
};

NestingScan scan_nesting(const std::string& text) {
  NestingScan scan;
  std::int64_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t offset = 0; offset < text.size(); ++offset) {
    const char c = text[offset];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
      if (depth > json_max_depth && scan.first_too_deep == std::string::npos)
        scan.first_too_deep = offset;
      scan.deepest = std::max(scan.deepest, depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return scan;
}

std::string line_and_column(const std::string& text, std::size_t offset) {
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] != '\n') continue;
    ++line;
    line_start = i + 1;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

void check_nesting(const std::string& text, const std::string& file_label) {
  const NestingScan scan = scan_nesting(text);
  if (scan.first_too_deep == std::string::npos) return;
  throw BadInput(file_label, "$",
                 "arrays and objects nested at most " + std::to_string(json_max_depth) +
                     " levels deep, got " + std::to_string(scan.deepest) + " levels (level " +
                     std::to_string(json_max_depth + 1) + " opens at " +
                     line_and_column(text, scan.first_too_deep) + ")");
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& file_label) {
  check_nesting(text, file_label);
  try {
    return nlohmann::json::parse(text, DuplicateKeyCheck(file_label));
  } catch (const nlohmann::json::parse_error& error) {
    std::string message = error.what();
    auto colon = message.find("parse error");
    throw BadInput(
        file_label, "$",
        "valid JSON (" + (colon == std::string::npos ? message : message.substr(colon)) + ")");
  } catch (const nlohmann::json::exception& error) {
    // Not a syntax error but still unreadable, e.g. a number beyond double range (found by
    // fuzzing).
    std::string message = error.what();
    auto bracket = message.find("] ");
    throw BadInput(file_label, "$",
                   "valid JSON (" +
                       (bracket == std::string::npos ? message : message.substr(bracket + 2)) +
                       ")");
  }
}

std::string json_type_name(const nlohmann::json& node) {
  if (node.is_number_integer()) return "integer";
  if (node.is_number_float()) return "number";
  return node.type_name();
}

void JsonCursor::fail(const std::string& expected) const {
  throw BadInput(file_, path_, expected);
}

void JsonCursor::expect_object() const {
  if (!node_->is_object()) fail("an object, got " + json_type_name(*node_));
}

void JsonCursor::expect_array(bool allow_empty) const {
  if (!node_->is_array()) fail("an array, got " + json_type_name(*node_));
  if (!allow_empty && node_->empty()) fail("a non-empty array");
}

JsonCursor JsonCursor::at(const std::string& key) const {
  expect_object();
  auto it = node_->find(key);
  if (it == node_->end())
    throw BadInput(file_, path_ + "." + key, "a value (the field is missing)");
  return JsonCursor(*it, file_, path_ + "." + key);
}

std::optional<JsonCursor> JsonCursor::find(const std::string& key) const {
  expect_object();
  auto it = node_->find(key);
  if (it == node_->end()) return std::nullopt;
  return JsonCursor(*it, file_, path_ + "." + key);
}

std::vector<JsonCursor> JsonCursor::items() const {
  expect_array(true);
  std::vector<JsonCursor> result;
  for (std::size_t i = 0; i < node_->size(); ++i) {
    result.emplace_back((*node_)[i], file_, path_ + "[" + std::to_string(i) + "]");
  }
  return result;
}

std::vector<std::string> JsonCursor::keys() const {
  expect_object();
  std::vector<std::string> result;
  for (auto it = node_->begin(); it != node_->end(); ++it) result.push_back(it.key());
  return result;
}

void JsonCursor::allow_only(std::initializer_list<const char*> allowed) const {
  for (const auto& key : keys()) {
    bool known = false;
    for (const char* name : allowed) known = known || key == name;
    if (known) continue;
    std::string list;
    for (const char* name : allowed) list += (list.empty() ? "" : ", ") + std::string(name);
    throw BadInput(file_, path_ + "." + key, "no such field (allowed here: " + list + ")");
  }
}

std::string JsonCursor::as_string() const {
  if (!node_->is_string()) fail("a string, got " + json_type_name(*node_));
  return node_->get<std::string>();
}

bool JsonCursor::as_bool() const {
  if (!node_->is_boolean()) fail("true or false, got " + json_type_name(*node_));
  return node_->get<bool>();
}

double JsonCursor::as_number() const {
  if (!node_->is_number()) fail("a number, got " + json_type_name(*node_));
  double value = node_->get<double>();
  if (!std::isfinite(value)) fail("a finite number");
  return value;
}

std::int64_t JsonCursor::as_int(std::int64_t minimum, std::int64_t maximum) const {
  std::string range =
      "an integer in [" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]";
  if (!node_->is_number_integer()) fail(range + ", got " + json_type_name(*node_));
  std::int64_t value =
      node_->is_number_unsigned()
          ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                node_->get<std::uint64_t>(), static_cast<std::uint64_t>(INT64_MAX)))
          : node_->get<std::int64_t>();
  if (value < minimum || value > maximum) fail(range + ", got " + std::to_string(value));
  return value;
}

std::vector<std::string> JsonCursor::as_string_list() const {
  if (node_->is_string()) return {node_->get<std::string>()};
  expect_array();
  std::vector<std::string> result;
  for (const auto& item : items()) result.push_back(item.as_string());
  return result;
}

}  // namespace bitcheck
