// bitcheck_validate_reports SCHEMA REPORT...: checks reports against docs/report.schema.json.
// Exit 0 when every report is valid, 1 when one is not (each violation printed with its JSON
// path), 2 when a file cannot be read or parsed or the schema uses an unimplemented keyword.
#include <fstream>
#include <iostream>

#include "schema/json_schema.h"

namespace {

nlohmann::json load(const char* path) {
  std::ifstream stream(path);
  if (!stream) throw std::runtime_error(std::string(path) + ": not a readable file");
  try {
    return nlohmann::json::parse(stream);
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(std::string(path) + ": not valid JSON (" + error.what() + ")");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: bitcheck_validate_reports SCHEMA REPORT...\n";
    return 2;
  }
  try {
    schema_check::JsonSchema schema(load(argv[1]));
    int status = 0;
    for (int i = 2; i < argc; ++i) {
      std::vector<std::string> errors = schema.validate(load(argv[i]));
      for (const auto& error : errors) std::cerr << argv[i] << ": " << error << "\n";
      std::cout << argv[i] << ": " << (errors.empty() ? "valid" : "INVALID") << "\n";
      if (!errors.empty()) status = 1;
    }
    return status;
  } catch (const std::exception& error) {
    std::cerr << "bitcheck_validate_reports: " << error.what() << "\n";
    return 2;
  }
}
