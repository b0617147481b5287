// The numerical contract: the embedded and on-disk copies load; every kind of bad contract is
// refused with BadInput naming the file and the exact JSON path.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/json_input.h"
#include "core/op.h"
#include "manifest.h"
#include "spec/contract.h"

using namespace bitcheck;
using nlohmann::json;

namespace {

const std::string source_dir = BITCHECK_SOURCE_DIR;
const std::string contract_path = source_dir + "/contract/contract.json";

std::string make_temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "bitcheck-contract-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

std::string write_json(const std::string& dir, const std::string& name, const json& document) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << document.dump(2);
  return path;
}

struct BadContract {
  const char* what;
  std::function<void(json&)> mutate;
  const char* json_path;
  const char* expected;  // a fragment of the expectation
};

}  // namespace

TEST_CASE("the embedded contract and contract/contract.json load and agree", "[contract]") {
  Registry registry;
  register_all(registry);
  Contract embedded = load_embedded_contract(registry);
  Contract on_disk = load_contract(contract_path, registry);
  CHECK(embedded.source == "embedded:contract/contract.json");
  CHECK(on_disk.source == contract_path);
  json a = embedded.to_json(), b = on_disk.to_json();
  a.erase("source");
  b.erase("source");
  CHECK(a == b);

  CHECK(embedded.schema_version == 1);
  CHECK(embedded.dtypes.at("bf16") == DTypeStatus::mandatory);
  CHECK(embedded.dtypes.at("fp32") == DTypeStatus::reference);
  CHECK(embedded.dtypes.at("fp8") == DTypeStatus::out_of_scope);
  CHECK(embedded.accumulation.at("bf16") == "fp32");
  CHECK(embedded.accumulation.at("fp16") == "fp32");
  CHECK_FALSE(embedded.fp32_gemm_allows_tf32);
  for (const OpDef* op : registry.ops()) {
    for (const auto& [dtype, status] : embedded.dtypes) {
      if (status == DTypeStatus::out_of_scope) continue;
      INFO(op->name << " " << dtype);
      if (op->threshold_of) {
        // A composed op (the chain) has no row: each output is under its call's op's row.
        CHECK_FALSE(embedded.thresholds.count(op->tolerance_key));
        CHECK(op->threshold_of("bwd.l0.qkv.dw") ==
              std::make_pair(std::string("matmul"), std::string("dw")));
        continue;
      }
      const Threshold& row = embedded.threshold(op->tolerance_key, dtype);
      CHECK(row.atol >= 0);
      CHECK(row.rtol >= 0);
      CHECK_FALSE(row.derivation.empty());
    }
  }
}

TEST_CASE("the contract says why an out-of-scope dtype is skipped", "[contract]") {
  Registry registry;
  register_all(registry);
  Contract contract = load_embedded_contract(registry);
  CHECK_FALSE(contract.dtype_skip_reason("bf16").has_value());
  CHECK_FALSE(contract.dtype_skip_reason("fp16").has_value());
  auto fp8 = contract.dtype_skip_reason("fp8");
  REQUIRE(fp8.has_value());
  CHECK_THAT(*fp8,
             Catch::Contains("out of scope") && Catch::Contains(contract.dtype_notes.at("fp8")));
  REQUIRE(contract.dtype_skip_reason("fp64").has_value());
  CHECK_THROWS_AS(contract.threshold("nope", "bf16"), std::logic_error);
}

TEST_CASE("invalid JSON in a contract is BadInput naming the file", "[contract]") {
  Registry registry;
  register_all(registry);
  const std::string path = source_dir + "/tests/data/contract_invalid_json.json";
  try {
    load_contract(path, registry);
    FAIL("an invalid contract loaded");
  } catch (const BadInput& error) {
    CHECK(error.file() == path);
    CHECK(error.json_path() == "$");
    CHECK_THAT(error.expected(), Catch::Contains("valid JSON"));
    CHECK_THAT(error.what(), Catch::Contains(path));
  }
}

TEST_CASE("an unreadable contract path is BadInput", "[contract]") {
  Registry registry;
  register_all(registry);
  try {
    load_contract("/nonexistent/contract.json", registry);
    FAIL("a missing contract loaded");
  } catch (const BadInput& error) {
    CHECK(error.file() == "/nonexistent/contract.json");
    CHECK(error.json_path() == "$");
  }
}

TEST_CASE("every kind of bad contract is BadInput naming file and JSON path", "[contract]") {
  Registry registry;
  register_all(registry);
  // The compiled-in copy matches the compiled-in registry, whatever the tree holds right now.
  const json base = json::parse(embedded_contract_json());
  const json threshold_row = {{"atol", 1e-3}, {"rtol", 1e-3}, {"derivation", "test"}};
  const std::vector<BadContract> cases = {
      {"missing field", [](json& c) { c["thresholds"]["matmul"]["bf16"].erase("atol"); },
       "$.thresholds.matmul.bf16.atol", "missing"},
      {"wrong type", [](json& c) { c["thresholds"]["matmul"]["bf16"]["atol"] = "0.1"; },
       "$.thresholds.matmul.bf16.atol", "a number, got string"},
      {"wrong type of a section", [](json& c) { c["dtypes"] = json::array(); }, "$.dtypes",
       "an object"},
      {"unknown top-level field", [](json& c) { c["extra"] = 1; }, "$.extra", "no such field"},
      {"unknown field in a threshold row",
       [](json& c) { c["thresholds"]["matmul"]["bf16"]["atoll"] = 1; },
       "$.thresholds.matmul.bf16.atoll", "no such field"},
      {"unknown dtype",
       [](json& c) {
         c["dtypes"]["fp64"] = {{"status", "optional"}, {"note", "n"}};
       },
       "$.dtypes.fp64", "a dtype bitcheck knows"},
      {"unknown dtype status", [](json& c) { c["dtypes"]["fp16"]["status"] = "maybe"; },
       "$.dtypes.fp16.status", "one of mandatory"},
      {"bf16 not mandatory", [](json& c) { c["dtypes"]["bf16"]["status"] = "optional"; },
       "$.dtypes.bf16.status", "mandatory"},
      {"bf16 absent", [](json& c) { c["dtypes"].erase("bf16"); }, "$.dtypes.bf16.status",
       "mandatory"},
      {"fp32 not the reference", [](json& c) { c["dtypes"]["fp32"]["status"] = "optional"; },
       "$.dtypes.fp32.status", "reference"},
      {"fp8 not out of scope", [](json& c) { c["dtypes"]["fp8"]["status"] = "optional"; },
       "$.dtypes.fp8.status", "out_of_scope"},
      {"bf16 accumulation not fp32", [](json& c) { c["accumulation"]["bf16"] = "bf16"; },
       "$.accumulation.bf16", "\"fp32\""},
      {"fp16 accumulation missing", [](json& c) { c["accumulation"].erase("fp16"); },
       "$.accumulation.fp16", "\"fp32\""},
      {"accumulation for an unknown dtype", [](json& c) { c["accumulation"]["fp64"] = "fp64"; },
       "$.accumulation.fp64", "a dtype listed under $.dtypes"},
      {"negative atol", [](json& c) { c["thresholds"]["matmul"]["bf16"]["atol"] = -1e-4; },
       "$.thresholds.matmul.bf16.atol", "non-negative"},
      {"negative rtol", [](json& c) { c["thresholds"]["rmsnorm"]["fp32"]["rtol"] = -1; },
       "$.thresholds.rmsnorm.fp32.rtol", "non-negative"},
      {"empty derivation", [](json& c) { c["thresholds"]["matmul"]["fp16"]["derivation"] = ""; },
       "$.thresholds.matmul.fp16.derivation", "non-empty"},
      {"missing threshold row for a registered op",
       [](json& c) { c["thresholds"]["rmsnorm"].erase("fp16"); }, "$.thresholds.rmsnorm.fp16",
       "threshold row"},
      {"missing threshold block for a registered op",
       [](json& c) { c["thresholds"].erase("matmul"); }, "$.thresholds.matmul.bf16",
       "threshold row"},
      {"unknown op key",
       [&](json& c) {
         c["thresholds"]["nope"] = {{"bf16", threshold_row}};
       },
       "$.thresholds.nope", "a registered op"},
      {"threshold row for an unknown dtype",
       [&](json& c) { c["thresholds"]["matmul"]["fp64"] = threshold_row; },
       "$.thresholds.matmul.fp64", "a dtype listed under $.dtypes"},
      {"wrong schema version", [](json& c) { c["schema_version"] = 2; }, "$.schema_version",
       "an integer in [1, 1]"},
      {"tf32 decision not a bool", [](json& c) { c["tf32"]["fp32_gemm_allows_tf32"] = "no"; },
       "$.tf32.fp32_gemm_allows_tf32", "true or false"},
  };
  const std::string dir = make_temp_dir();
  for (const auto& bad : cases) {
    json document = base;
    bad.mutate(document);
    const std::string path = write_json(dir, "contract.json", document);
    INFO(bad.what);
    try {
      load_contract(path, registry);
      FAIL_CHECK("contract accepted: " << bad.what);
    } catch (const BadInput& error) {
      CHECK(error.file() == path);
      CHECK(error.json_path() == bad.json_path);
      CHECK_THAT(error.expected(), Catch::Contains(bad.expected));
      CHECK_THAT(error.what(), Catch::Contains(path) && Catch::Contains(bad.json_path));
    }
  }
  std::filesystem::remove_all(dir);
}

// "i32" is an element type for index tensors, not a dtype of the contract: a contract listing it
// would let a sweep run float ops on int32 storage (inputs truncate to zero).
TEST_CASE("a contract listing i32 as a dtype is refused", "[contract]") {
  Registry registry;
  register_all(registry);
  json document = json::parse(embedded_contract_json());
  document["dtypes"]["i32"] = {{"status", "optional"}, {"note", "index tensors"}};
  document["accumulation"]["i32"] = "i32";
  for (auto& [key, rows] : document["thresholds"].items()) {
    rows["i32"] = {{"atol", 0}, {"rtol", 0}, {"derivation", "exact"}};
  }
  try {
    parse_contract(document, "i32.json", registry);
    FAIL("a contract with an i32 dtype loaded");
  } catch (const BadInput& error) {
    CHECK(error.file() == "i32.json");
    CHECK(error.json_path() == "$.dtypes.i32");
  }
}
