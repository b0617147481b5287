// Impls from outside bitcheck: C ABI plugins (include/bitcheck/plugin.h, loaded with dlopen) and
// Python functions (run in a `python3 -m bitcheck_py` worker). Both register impls of existing ops
// under a namespace: plugin:<plugin>/<impl> and py:<module>:<function>.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bitcheck {

class Registry;

struct ExternalImpls {
  std::vector<std::string> plugins;   // shared-library paths (absolute once loaded)
  std::vector<std::string> py_impls;  // "module:function"
  bool empty() const { return plugins.empty() && py_impls.empty(); }
};

// Loads each plugin and Python impl into `registry` and remembers them for the reports' meta, the
// sweep's worker processes and repro. Bad input (a file dlopen refuses, a missing symbol, an ABI
// version, op or dtype bitcheck does not know) throws BadInput naming the file and the field.
void load_external_impls(Registry& registry, const ExternalImpls& impls);

// The spec's "plugins" (paths relative to the spec's directory) and "py_impls".
ExternalImpls external_impls_of_spec(const std::string& spec_path);
// What a report's meta says its sweep loaded (repro and minimize load the same).
ExternalImpls external_impls_of_report(const std::string& report_path);

// Everything this process loaded, in load order.
const ExternalImpls& loaded_external_impls();
// The command-line arguments that make a worker process load the same impls.
std::vector<std::string> external_impl_arguments();
// Report meta: the plugin ABI version of this binary, and what was loaded.
void add_plugin_meta(nlohmann::json& meta);
// True for the name of a plugin or Python impl.
bool is_external_impl(const std::string& impl_name);

// Registers one Python impl (python_impl.cpp). BadInput when the function cannot be described.
void register_python_impl(Registry& registry, const std::string& module_function);

}  // namespace bitcheck
