// Per-tensor threshold overrides in the contract: token reductions get their own bound, other
// outputs keep the op's row, and a malformed override is BadInput naming its path.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "manifest.h"
#include "spec/contract.h"

using namespace bitcheck;

TEST_CASE("a tensor override applies to that output only", "[contract]") {
  Registry registry;
  register_all(registry);
  Contract contract = load_embedded_contract(registry);
  const Threshold& y = contract.threshold("matmul", "fp32", "y");
  const Threshold& dw = contract.threshold("matmul", "fp32", "dw");
  CHECK(y.atol == contract.threshold("matmul", "fp32").atol);
  CHECK(dw.atol > y.atol);  // the fp32 token sum has its own, wider bound
  CHECK_FALSE(dw.derivation.empty());
}

TEST_CASE("a malformed tensor override is BadInput with its path", "[contract]") {
  Registry registry;
  register_all(registry);
  nlohmann::json document = parse_json_text(embedded_contract_json(), "c.json");
  document["thresholds"]["matmul"]["fp32"]["tensors"]["dw"].erase("rtol");
  try {
    parse_contract(document, "c.json", registry);
    FAIL("accepted an override without rtol");
  } catch (const BadInput& error) {
    CHECK(error.file() == "c.json");
    CHECK(error.json_path() == "$.thresholds.matmul.fp32.tensors.dw.rtol");
  }
}
