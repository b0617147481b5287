// Renders a report's status matrix (op x dtype x forward/backward) for people and CI systems:
// markdown and JUnit XML (one test case per bitcheck case); the HTML page is report_page.h.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace bitcheck {

// One cell of a report's status matrix as text: "pass 36", "drift 3 of 36 (+2 skipped)", "-".
std::string matrix_cell_text(const nlohmann::json& matrix, const std::string& op,
                             const std::string& dtype, const std::string& pass);

// With provenance: the kernels the two layouts of a finding ran, by name ("kernels: alone ran A;
// batch ran B + C"), or "" when the case recorded none for either.
std::string finding_kernels_text(const nlohmann::json& case_entry, const std::string& layout,
                                 const std::string& reference_layout);

std::string render_matrix_markdown(const nlohmann::json& report);
std::string render_junit(const nlohmann::json& report);

}  // namespace bitcheck
