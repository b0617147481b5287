// `bitcheck contract show|check`: print the numerical contract as bitcheck reads it, or validate
// it.
#include "spec/contract.h"

#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "sweep/sweep.h"

namespace bitcheck::cli {
namespace {

void print_check(const Contract& contract) {
  std::size_t rows = 0;
  for (const auto& [key, per_dtype] : contract.thresholds) rows += per_dtype.size();
  std::cout << "contract OK: " << contract.source << " (" << contract.dtypes.size() << " dtypes, "
            << rows << " threshold rows, TF32 for fp32 GEMM: "
            << (contract.fp32_gemm_allows_tf32 ? "allowed" : "off") << ")\n";
}

}  // namespace

void add_contract_command(CLI::App& app, Context& context) {
  auto contract_path = std::make_shared<std::string>();
  auto* command = app.add_subcommand("contract", "Show or check the numerical contract");
  command->require_subcommand(1);
  auto* show = command->add_subcommand("show", "Print the contract as bitcheck reads it");
  auto* check = command->add_subcommand("check", "Validate the contract; exit 2 if it is invalid");
  for (auto* subcommand : {show, check}) {
    subcommand->add_option("--contract", *contract_path,
                           "Contract JSON (default: embedded contract/contract.json)");
  }
  context.on(command, [contract_path, show](const Registry& registry) {
    Contract contract = load_contract_or_embedded(*contract_path, registry);
    if (show->parsed()) {
      std::cout << contract.to_json().dump(2) << "\n";
    } else {
      print_check(contract);
    }
    return exit_pass;
  });
}

}  // namespace bitcheck::cli
