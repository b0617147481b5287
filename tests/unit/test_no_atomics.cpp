// No atomics in backward kernels: scans every .cu file under kernels/ and fails when a kernel that
// takes part in a backward pass uses an atomic operation (atomicAdd, atomicCAS, ..., or the PTX
// red./atom. instructions), except on lines or in kernels marked as controls. A control marks
// itself with a `bitcheck-control:` comment on the line, or with `control` in the kernel's name.
// Backward code is recognised by name (see names_backward): the file's or the kernel's; the
// atomic's line belongs to the last __global__ function declared above it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// A name (kernel or file) is backward code when one of its '_'/'.'/'/'-separated words is a
// gradient word: backward, bwd, grad..., dw, dweight, dscale, dx, dq, dk, dv, dkdv, scatter,
// accumulate.
bool names_backward(const std::string& name) {
  std::string word;
  auto is_gradient_word = [](const std::string& w) {
    for (const char* g : {"backward", "bwd", "dw", "dweight", "dscale", "dx", "dq", "dk", "dv",
                          "dkdv", "scatter", "accumulate"}) {
      if (w == g) return true;
    }
    return w.rfind("grad", 0) == 0;
  };
  for (char c : lower(name) + "_") {
    if (c == '_' || c == '.' || c == '/') {
      if (is_gradient_word(word)) return true;
      word.clear();
    } else {
      word += c;
    }
  }
  return false;
}

// Violations in one source text: "file:line: text" for each unmarked atomic in backward code.
std::vector<std::string> scan(const std::string& file_name, const std::string& text) {
  static const std::regex atomic(R"((\batomic[A-Z][A-Za-z_]*\s*\()|(\bred\.)|(\batom\.))");
  static const std::regex kernel(R"(__global__[^()]*?\b([A-Za-z_][A-Za-z_0-9]*)\s*\()");
  std::vector<std::string> violations;
  std::istringstream lines(text);
  std::string line, current_kernel;
  int number = 0;
  bool file_is_backward = names_backward(file_name);
  std::string pending;  // a __global__ declaration may span lines
  while (std::getline(lines, line)) {
    ++number;
    if (line.find("__global__") != std::string::npos || !pending.empty()) {
      pending += line + " ";
      std::smatch match;
      if (std::regex_search(pending, match, kernel)) {
        current_kernel = match[1];
        pending.clear();
      } else if (pending.size() > 400) {
        pending.clear();
      }
    }
    std::string code = line.substr(0, line.find("//"));
    if (!std::regex_search(code, atomic)) continue;
    if (line.find("bitcheck-control:") != std::string::npos) continue;
    if (lower(current_kernel).find("control") != std::string::npos) continue;
    if (!file_is_backward && !names_backward(current_kernel)) continue;
    violations.push_back(file_name + ":" + std::to_string(number) + ": " + line);
  }
  return violations;
}

}  // namespace

TEST_CASE("backward kernels under kernels/ use no atomics outside named controls", "[no_atomics]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(BITCHECK_SOURCE_DIR) / "kernels";
  REQUIRE(fs::is_directory(root));
  std::vector<std::string> violations;
  int scanned = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".cu") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto found = scan(fs::relative(entry.path(), root).string(), text.str());
    violations.insert(violations.end(), found.begin(), found.end());
    ++scanned;
  }
  CHECK(scanned > 0);
  std::string report;
  for (const auto& v : violations) report += v + "\n";
  INFO(report);
  CHECK(violations.empty());
}

TEST_CASE("the atomics scan catches planted atomics and honours control markers", "[no_atomics]") {
  const std::string backward_kernel =
      "__global__ void dweight_kernel(float* dw, const float* x) {\n"
      "  atomicAdd(&dw[threadIdx.x], x[threadIdx.x]);\n"
      "}\n";
  CHECK(scan("norm/k.cu", backward_kernel).size() == 1);
  CHECK(scan("norm/k.cu",
             "__global__ void\n  layer_backward(float* p) {\n  asm(\"red.global.add.f32 [%0], "
             "%1;\" :: \"l\"(p), \"f\"(1.f));\n}\n")
            .size() == 1);
  CHECK(scan("x/grad_kernels.cu", "__global__ void f(unsigned* p) { atomicCAS(p, 0u, 1u); }\n")
            .size() == 1);
  // Controls are exempt, by kernel name or by a marker on the line.
  CHECK(scan("norm/k.cu",
             "__global__ void dweight_atomic_control(float* dw) {\n  atomicAdd(dw, 1.f);\n}\n")
            .empty());
  CHECK(scan("norm/k.cu",
             "__global__ void dweight_kernel(float* dw) {\n  atomicAdd(dw, 1.f);  // "
             "bitcheck-control: models atomics\n}\n")
            .empty());
  CHECK(
      scan("e/k.cu", "__global__ void atomic_scatter_kernel(float* t) {\n  atomicAdd(t, 1.f);\n}\n")
          .size() == 1);
  // Forward kernels and comments are not backward code.
  CHECK(scan("norm/k.cu",
             "__global__ void forward_kernel(int* counter) {\n  atomicAdd(counter, 1);\n}\n")
            .empty());
  CHECK(scan("norm/dweight.cu", "// atomicAdd( would break the order\n").empty());
}
