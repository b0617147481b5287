// `bitcheck list`: the ops, impls, dtypes, backends and layouts, as text or JSON.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/op.h"
#include "report/coverage.h"
#include "run/layout.h"
#include "spec/contract.h"

namespace bitcheck::cli {
namespace {

nlohmann::json paths_json(const Impl& impl) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& decl : impl.paths()) list.push_back(path_decl_to_json(decl));
  return list;
}

nlohmann::json list_json(const Registry& registry, const Contract& contract) {
  nlohmann::json j;
  for (const OpDef* op : registry.ops()) {
    nlohmann::json op_json = {{"name", op->name},
                              {"summary", op->summary},
                              {"dims", op->dim_names},
                              {"optional_dims", op->optional_dim_names},
                              {"has_backward", op->has_backward},
                              {"impls", nlohmann::json::array()}};
    for (Impl* impl : registry.impls(op->name)) {
      op_json["impls"].push_back({{"name", impl->name()},
                                  {"backend", impl->backend()},
                                  {"claims_invariance", impl->claims_invariance()},
                                  {"library_default", impl->is_library_default()},
                                  {"description", impl->description()},
                                  {"paths", paths_json(*impl)}});
    }
    j["ops"].push_back(op_json);
  }
  for (const auto& [dtype, status] : contract.dtypes) j["dtypes"][dtype] = to_string(status);
  for (const auto& backend : registry.backends()) {
    j["backends"][backend] = {{"available", registry.backend_available(backend)},
                              {"reason", registry.backend_reason(backend)}};
  }
  j["layouts"] = known_layouts();
  j["layouts"].push_back(graph_layout);  // accepted where a spec names it, never a default
  return j;
}

void print_list_text(const nlohmann::json& j, bool with_paths) {
  std::cout << "ops and impls (* = control, expected to drift; ~ = library default, observed):\n";
  for (const auto& op : j["ops"]) {
    std::cout << "  " << op["name"].get<std::string>() << "  " << op["summary"].get<std::string>()
              << "\n";
    for (const auto& impl : op["impls"]) {
      const char* mark = impl["claims_invariance"].get<bool>() ? " "
                         : impl["library_default"].get<bool>() ? "~"
                                                               : "*";
      std::cout << "    " << mark << " " << op["name"].get<std::string>() << "/"
                << impl["name"].get<std::string>() << " [" << impl["backend"].get<std::string>()
                << "] " << impl["description"].get<std::string>() << "\n";
      if (!with_paths) continue;
      for (const auto& path : impl["paths"]) {
        std::cout << "        path " << path["name"].get<std::string>()
                  << (path.value("family", false) ? ":<member>" : "") << "  "
                  << path["description"].get<std::string>();
        if (path.contains("forced_by"))
          std::cout << " [forced by " << path["forced_by"].get<std::string>() << "]";
        if (!path.value("batch_reachable", true)) std::cout << " [no batch selects it]";
        if (!path.value("required", true)) std::cout << " [informative]";
        std::cout << "\n";
      }
    }
  }
  std::cout << "dtypes:";
  for (const auto& [dtype, status] : j["dtypes"].items()) {
    std::cout << " " << dtype << " (" << status.get<std::string>() << ")";
  }
  std::cout << "\nbackends:";
  for (const auto& [name, backend] : j["backends"].items()) {
    std::cout << " " << name
              << (backend["available"].get<bool>()
                      ? " (available)"
                      : " (unavailable: " + backend["reason"].get<std::string>() + ")");
  }
  std::cout << "\nlayouts:";
  for (const auto& layout : j["layouts"]) std::cout << " " << layout.get<std::string>();
  std::cout << "\n";
}

}  // namespace

void add_list_command(CLI::App& app, Context& context) {
  auto as_json = std::make_shared<bool>(false);
  auto with_paths = std::make_shared<bool>(false);
  auto* command = app.add_subcommand("list", "List ops, impls, dtypes, backends and layouts");
  command->add_flag("--json", *as_json, "Machine-readable output");
  command->add_flag("--paths", *with_paths, "Each impl's declared launch paths");
  auto external = std::make_shared<ExternalImpls>();
  add_external_impl_options(*command, *external);
  context.on(
      command,
      [as_json, with_paths](const Registry& registry) {
        nlohmann::json j = list_json(registry, load_embedded_contract(registry));
        if (*as_json) {
          std::cout << j.dump(2) << "\n";
        } else {
          print_list_text(j, *with_paths);
        }
        return exit_pass;
      },
      [external] { return *external; });
}

}  // namespace bitcheck::cli
