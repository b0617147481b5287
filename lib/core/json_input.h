// Strict reading of input JSON (sweep specs, contracts, reports): every accessor knows its file
// and JSON path, and a wrong or missing value throws BadInput naming both and what was expected.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

// The deepest nesting of arrays and objects an input may have. bitcheck's own files (specs,
// contracts, pin tables, reports, worker replies) nest at most about ten levels; a document
// deeper than this is refused before it is parsed, in time and memory linear in its size.
inline constexpr std::int64_t json_max_depth = 64;

// Reads and parses a JSON file; an unreadable path, invalid JSON or nesting deeper than
// json_max_depth is BadInput.
nlohmann::json load_json_file(const std::string& path);
nlohmann::json parse_json_text(const std::string& text, const std::string& file_label);

class JsonCursor {
 public:
  JsonCursor(const nlohmann::json& node, std::string file, std::string path = "$")
      : node_(&node), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& node() const { return *node_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }

  JsonCursor at(const std::string& key) const;  // required member of an object
  std::optional<JsonCursor> find(const std::string& key) const;
  std::vector<JsonCursor> items() const;  // elements of an array
  std::vector<std::string> keys() const;  // members of an object, in file order
  void expect_object() const;
  void expect_array(bool allow_empty = false) const;
  // Unknown members are an error: a typo must not silently run something else.
  void allow_only(std::initializer_list<const char*> keys) const;

  std::string as_string() const;
  bool as_bool() const;
  double as_number() const;                                               // finite
  std::int64_t as_int(std::int64_t minimum, std::int64_t maximum) const;  // integer in range
  std::vector<std::string> as_string_list() const;  // a string or an array of strings

  [[noreturn]] void fail(const std::string& expected) const;

 private:
  const nlohmann::json* node_;
  std::string file_;
  std::string path_;
};

std::string json_type_name(const nlohmann::json& node);

}  // namespace bitcheck
