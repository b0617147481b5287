// Renders a report's status matrix (op x dtype x forward/backward) for people and CI systems:
// markdown, one self-contained HTML page, and JUnit XML (one test case per bitcheck case).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace bitcheck {

std::string render_matrix_markdown(const nlohmann::json& report);
std::string render_matrix_html(const nlohmann::json& report);
std::string render_junit(const nlohmann::json& report);

}  // namespace bitcheck
