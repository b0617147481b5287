// The cuBLASLt pin table (host code of the CUDA backend): the committed table loads, a key in it
// is served from the file, a missing key is derived exactly once, and a malformed table is
// BadInput naming the file and JSON path. Built only with the CUDA backend.
#include <catch2/catch.hpp>

#ifdef BITCHECK_HAVE_CUDA
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "matmul/pin_table.h"

using bitcheck::cuda::LtConfig;
using bitcheck::cuda::PinKey;
using bitcheck::cuda::PinTable;

TEST_CASE("the committed pin table serves its keys and derives missing ones once", "[pins]") {
  PinTable& table = PinTable::instance();
  table.configure(std::string(BITCHECK_SOURCE_DIR) + "/contract/pins", false);
  PinKey pinned{"sm_90", 130100, "fp16", "forward", 4096, 4096, 0};
  auto entry = table.lookup(pinned, []() -> LtConfig {
    FAIL("a pinned key must not be derived");
    return {};
  });
  CHECK(entry->source.find("pin file") == 0);
  CHECK(entry->buckets.empty());
  CHECK(entry->config.splitk_num == 1);
  CHECK(entry->config.algo_id >= 0);

  // The bf16 forward Llama shapes are bucketed (written by `bitcheck algos`): every M from 1 up
  // falls in exactly one bucket, and every bucket is split-K 1.
  for (std::int64_t n : {4096, 6144, 28672, 128256}) {
    PinKey bucketed{"sm_90", 130100, "bf16", "forward", n, 4096, 0};
    auto buckets = table.lookup(bucketed, []() -> LtConfig {
      FAIL("a pinned key must not be derived");
      return {};
    });
    REQUIRE_FALSE(buckets->buckets.empty());
    for (std::int64_t rows : {1, 16, 17, 64, 257, 1000, 4096, 8192, 100000}) {
      int holding = 0;
      for (const auto& bucket : buckets->buckets) holding += bucket.contains(rows) ? 1 : 0;
      CHECK(holding == 1);
      REQUIRE(buckets->bucket_for_rows(rows) != nullptr);
      CHECK(buckets->config_for_rows(rows).splitk_num == 1);
    }
  }

  PinKey missing{"sm_90", 130100, "bf16", "forward", 8, 8, 0};
  int derivations = 0;
  auto derive = [&] {
    ++derivations;
    LtConfig config;
    config.algo_id = 1;
    return config;
  };
  CHECK(table.lookup(missing, derive)->source == "derived");
  CHECK(table.lookup(missing, derive)->config.algo_id == 1);
  CHECK(derivations == 1);  // once per key, never per call
}

TEST_CASE("a malformed pin table is BadInput with file and path", "[pins]") {
  std::string path = "/tmp/bitcheck-bad-pins.json";
  std::ofstream(path)
      << R"({"schema_version": 1, "pins": [{"key": {"arch": "sm_90"}, "config": {}}]})";
  PinTable& table = PinTable::instance();
  table.configure(path, false);
  try {
    table.lookup(PinKey{"sm_90", 1, "bf16", "forward", 8, 8, 0}, [] { return LtConfig{}; });
    FAIL("accepted a pin without cublaslt_version");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == path);
    CHECK(error.json_path() == "$.pins[0].key.cublaslt_version");
  }
  std::remove(path.c_str());
  table.configure("contract/pins", false);
}
#endif
