// A small JSON Schema validator for the tests: exactly the keywords docs/report.schema.json uses
// (type, properties, required, additionalProperties, items, enum, const, $ref/$defs, minimum,
// anyOf, oneOf, pattern, and the annotations $schema, $id, title, description). A schema using
// any other keyword is refused when loaded, so no part of it can go silently unchecked.
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace schema_check {

class JsonSchema {
 public:
  explicit JsonSchema(nlohmann::json schema) : root_(std::move(schema)) {
    check_keywords(root_, "#");
  }

  // Every violation, as "JSON path: what was expected"; empty when the instance is valid.
  std::vector<std::string> validate(const nlohmann::json& instance) const {
    std::vector<std::string> errors;
    check(root_, instance, "$", errors);
    return errors;
  }

 private:
  // Keywords whose value is a schema, a map of schemas, or a list of schemas.
  static const std::set<std::string>& keywords() {
    static const std::set<std::string> names = {
        "$schema", "$id",    "title",      "description", "$defs",
        "$ref",    "type",   "properties", "required",    "additionalProperties",
        "items",   "enum",   "const",      "minimum",     "anyOf",
        "oneOf",   "pattern"};
    return names;
  }

  static void check_keywords(const nlohmann::json& schema, const std::string& at) {
    if (schema.is_boolean()) return;
    if (!schema.is_object())
      throw std::invalid_argument(at + ": a schema must be an object or a boolean");
    for (const auto& [keyword, value] : schema.items()) {
      if (!keywords().count(keyword)) {
        throw std::invalid_argument(at + ": keyword \"" + keyword +
                                    "\" is not implemented by this validator");
      }
      const std::string here = at + "/" + keyword;
      if (keyword == "properties" || keyword == "$defs") {
        for (const auto& [name, sub] : value.items()) check_keywords(sub, here + "/" + name);
      } else if (keyword == "items" || keyword == "additionalProperties") {
        check_keywords(value, here);
      } else if (keyword == "anyOf" || keyword == "oneOf") {
        if (!value.is_array() || value.empty())
          throw std::invalid_argument(here + ": a non-empty array of schemas");
        for (std::size_t i = 0; i < value.size(); ++i)
          check_keywords(value[i], here + "/" + std::to_string(i));
      } else if (keyword == "$ref" &&
                 (!value.is_string() || value.get<std::string>().rfind("#/", 0) != 0)) {
        throw std::invalid_argument(here + ": only local references (\"#/...\") are implemented");
      } else if (keyword == "type") {
        for (const auto& type : value.is_array() ? value : nlohmann::json::array({value}))
          has_type(nullptr, type.get<std::string>());
      } else if (keyword == "pattern") {
        std::regex(value.get<std::string>(), std::regex::ECMAScript);  // throws on a bad pattern
      }
    }
  }

  const nlohmann::json& resolve(const std::string& reference) const {
    const nlohmann::json* node = &root_;
    std::size_t start = 2;
    while (start <= reference.size()) {
      std::size_t end = reference.find('/', start);
      if (end == std::string::npos) end = reference.size();
      const std::string token = reference.substr(start, end - start);
      if (!node->is_object() || !node->contains(token))
        throw std::invalid_argument("unresolvable $ref " + reference);
      node = &(*node)[token];
      start = end + 1;
    }
    return *node;
  }

  static bool has_type(const nlohmann::json& value, const std::string& type) {
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "boolean") return value.is_boolean();
    if (type == "null") return value.is_null();
    if (type == "number") return value.is_number();
    if (type == "integer") {
      return value.is_number_integer() ||
             (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
    }
    throw std::invalid_argument("unknown type name \"" + type + "\" in the schema");
  }

  static std::string type_name(const nlohmann::json& value) {
    if (value.is_number_integer()) return "integer";
    if (value.is_number()) return "number";
    return value.type_name();
  }

  void check(const nlohmann::json& schema, const nlohmann::json& value, const std::string& at,
             std::vector<std::string>& errors) const {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) errors.push_back(at + ": no value allowed here");
      return;
    }
    if (auto it = schema.find("$ref"); it != schema.end())
      check(resolve(it->get<std::string>()), value, at, errors);
    if (auto it = schema.find("type"); it != schema.end()) {
      std::vector<std::string> types = it->is_array()
                                           ? it->get<std::vector<std::string>>()
                                           : std::vector<std::string>{it->get<std::string>()};
      bool matched = false;
      for (const auto& type : types) matched = matched || has_type(value, type);
      if (!matched) {
        errors.push_back(at + ": expected type " + it->dump() + ", got " + type_name(value));
        return;  // the keywords below assume the type
      }
    }
    if (auto it = schema.find("const"); it != schema.end() && value != *it) {
      errors.push_back(at + ": expected " + it->dump() + ", got " + value.dump());
    }
    if (auto it = schema.find("enum"); it != schema.end()) {
      bool listed = false;
      for (const auto& option : *it) listed = listed || value == option;
      if (!listed)
        errors.push_back(at + ": expected one of " + it->dump() + ", got " + value.dump());
    }
    if (auto it = schema.find("minimum");
        it != schema.end() && value.is_number() && value.get<double>() < it->get<double>()) {
      errors.push_back(at + ": expected at least " + it->dump() + ", got " + value.dump());
    }
    if (auto it = schema.find("pattern");
        it != schema.end() && value.is_string() &&
        !std::regex_search(value.get<std::string>(), std::regex(it->get<std::string>()))) {
      errors.push_back(at + ": expected a string matching " + it->dump() + ", got " + value.dump());
    }
    if (value.is_object()) check_object(schema, value, at, errors);
    if (auto it = schema.find("items"); it != schema.end() && value.is_array()) {
      for (std::size_t i = 0; i < value.size(); ++i)
        check(*it, value[i], at + "[" + std::to_string(i) + "]", errors);
    }
    if (auto it = schema.find("anyOf"); it != schema.end())
      check_alternatives(*it, value, at, false, errors);
    if (auto it = schema.find("oneOf"); it != schema.end())
      check_alternatives(*it, value, at, true, errors);
  }

  void check_object(const nlohmann::json& schema, const nlohmann::json& value,
                    const std::string& at, std::vector<std::string>& errors) const {
    if (auto it = schema.find("required"); it != schema.end()) {
      for (const auto& name : *it) {
        if (!value.contains(name.get<std::string>()))
          errors.push_back(at + "." + name.get<std::string>() + ": missing (required)");
      }
    }
    const auto properties = schema.find("properties");
    const auto additional = schema.find("additionalProperties");
    for (const auto& [name, member] : value.items()) {
      if (properties != schema.end() && properties->contains(name)) {
        check((*properties)[name], member, at + "." + name, errors);
      } else if (additional != schema.end()) {
        if (additional->is_boolean() && !additional->get<bool>()) {
          errors.push_back(at + "." + name + ": no such field in the schema");
        } else {
          check(*additional, member, at + "." + name, errors);
        }
      }
    }
  }

  void check_alternatives(const nlohmann::json& alternatives, const nlohmann::json& value,
                          const std::string& at, bool exactly_one,
                          std::vector<std::string>& errors) const {
    std::size_t matching = 0;
    std::string reasons;
    for (std::size_t i = 0; i < alternatives.size(); ++i) {
      std::vector<std::string> branch;
      check(alternatives[i], value, at, branch);
      if (branch.empty()) {
        ++matching;
      } else {
        reasons += " [alternative " + std::to_string(i) + ": " + branch.front() +
                   (branch.size() > 1 ? " (+" + std::to_string(branch.size() - 1) + " more)" : "") +
                   "]";
      }
    }
    if (matching == 0) errors.push_back(at + ": matches none of the alternatives" + reasons);
    if (exactly_one && matching > 1)
      errors.push_back(at + ": matches " + std::to_string(matching) +
                       " alternatives of a oneOf, expected exactly one");
  }

  nlohmann::json root_;
};

}  // namespace schema_check
