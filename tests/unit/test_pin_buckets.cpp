// Bucketed cuBLASLt pins (written by `bitcheck algos`): parsing, the configuration per M, the
// pin-file form, merging one entry into a file or a pin directory (one file per key), and malformed
// tables as BadInput naming the file and JSON path. Host code of the CUDA backend: built only with
// it, runs without a GPU.
#include <catch2/catch.hpp>

#ifdef BITCHECK_HAVE_CUDA
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "matmul/pin_table.h"
#include "temp_dir.h"

using namespace bitcheck::cuda;

namespace {

nlohmann::json config_json(int algo, int splits) {
  LtConfig config;
  config.algo_id = algo;
  config.tile_id = 24;
  config.splitk_num = splits;
  config.reduction_scheme = splits == 1 ? 0 : 2;
  return lt_config_to_json(config);
}

nlohmann::json key_json(std::int64_t n) {
  return {{"arch", "sm_90"}, {"cublaslt_version", 130100},
          {"dtype", "bf16"}, {"form", "forward"},
          {"N", n},          {"K", 4096}};
}

nlohmann::json bucketed_entry(std::int64_t n, int small_algo) {
  return {{"key", key_json(n)},
          {"buckets",
           {{{"min_rows", 1}, {"max_rows", 64}, {"config", config_json(small_algo, 4)}},
            {{"min_rows", 65}, {"config", config_json(66, 1)}}}},
          {"bit_class", {{"fingerprint", "0123456789abcdef"}, {"rows", 8192}}},
          {"measured", {{"score", 1.1}}}};
}

nlohmann::json document(const std::vector<nlohmann::json>& pins) {
  nlohmann::json doc = {{"schema_version", 1}, {"pins", nlohmann::json::array()}};
  for (const auto& pin : pins) doc["pins"].push_back(pin);
  return doc;
}

std::string write_temp(const std::string& name, const nlohmann::json& contents) {
  std::string path = "/tmp/bitcheck-test-" + name + ".json";
  std::ofstream(path) << contents.dump(2);
  return path;
}

void expect_bad_input(const nlohmann::json& doc, const std::string& json_path,
                      const std::string& expected_part) {
  try {
    parse_pin_document(doc, "pins.json");
    FAIL("accepted " << doc.dump());
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == "pins.json");
    CHECK(error.json_path() == json_path);
    CHECK(error.expected().find(expected_part) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("a bucketed pin serves each M from its bucket - single-config pins still load",
          "[pins]") {
  nlohmann::json single = {{"key", key_json(6144)}, {"config", config_json(66, 1)}};
  auto entries = parse_pin_document(document({bucketed_entry(4096, 71), single}), "pins.json");
  REQUIRE(entries.size() == 2);
  const PinEntry& bucketed = entries[0];
  REQUIRE(bucketed.buckets.size() == 2);
  CHECK(bucketed.config_for_rows(1).algo_id == 71);
  CHECK(bucketed.config_for_rows(64).algo_id == 71);
  CHECK(bucketed.config_for_rows(64).splitk_num == 4);
  CHECK(bucketed.config_for_rows(65).algo_id == 66);
  CHECK(bucketed.config_for_rows(1000000).splitk_num == 1);
  CHECK(bucketed.bucket_for_rows(65)->min_rows == 65);
  const nlohmann::json record = bucketed.bucket_record(70);  // what a case records
  CHECK(record["bucket"] == nlohmann::json({{"min_rows", 65}, {"max_rows", 0}, {"rows", 70}}));
  CHECK(record["table"]["buckets"] == 2);
  CHECK(record["table"]["fingerprint"] == bucketed.table_fingerprint);
  CHECK(record["bit_class"]["fingerprint"] == "0123456789abcdef");
  CHECK(bucketed.bit_class["fingerprint"] == "0123456789abcdef");
  CHECK_THROWS_AS(bucketed.config_for_rows(0), std::invalid_argument);
  CHECK(entries[1].buckets.empty());
  CHECK(entries[1].bucket_for_rows(5) == nullptr);
  CHECK(entries[1].bucket_record(5).is_null());
  CHECK(entries[1].config_for_rows(5).algo_id == 66);  // one configuration for every M
  CHECK(entries[1].source == "pin file pins.json");

  // The pin-file form round-trips, measurements included.
  auto again =
      parse_pin_document(document({bucketed.to_json(), entries[1].to_json()}), "again.json");
  CHECK(again[0].config_for_rows(7).same_kernel(bucketed.config_for_rows(7)));
  CHECK(again[0].config_for_rows(700).same_kernel(bucketed.config_for_rows(700)));
  CHECK(again[0].measured["score"] == 1.1);
  CHECK(again[1].config.same_kernel(entries[1].config));
}

TEST_CASE("a configuration without an algorithm is refused before cuBLASLt sees it", "[pins]") {
  // A bucketed entry's single `config` is unused and names no algorithm: running it must fail
  // loudly rather than let cuBLASLt pick a kernel (no device needed: refused before any call).
  const PinEntry bucketed =
      parse_pin_document(document({bucketed_entry(4096, 71)}), "pins.json").front();
  CHECK(bucketed.config.algo_id < 0);
  CHECK_THROWS_WITH(lt_gemm(bucketed.config, GemmDType::bf16, nullptr, nullptr, nullptr, 1, 4096,
                            4096, nullptr, 0, nullptr),
                    Catch::Contains("no cuBLASLt algorithm in the configuration"));
  CHECK_THROWS_AS(lt_gemm_nn(LtConfig{}, GemmDType::bf16, nullptr, nullptr, nullptr, 1, 4096, 4096,
                             nullptr, 0, nullptr),
                  std::invalid_argument);
}

TEST_CASE("the pin table looks up a bucketed entry from its file without deriving", "[pins]") {
  std::string path = write_temp("bucketed-pins", document({bucketed_entry(4096, 71)}));
  PinTable& table = PinTable::instance();
  table.configure(path, false);
  const auto entry =
      table.lookup(PinKey{"sm_90", 130100, "bf16", "forward", 4096, 4096, 0}, []() -> LtConfig {
        FAIL("a pinned key must not be derived");
        return {};
      });
  CHECK(entry->config_for_rows(3).algo_id == 71);
  CHECK(entry->config_for_rows(3000).algo_id == 66);
  // Shared, not copied: the same table for every lookup.
  CHECK(table.lookup(PinKey{"sm_90", 130100, "bf16", "forward", 4096, 4096, 0},
                     [] { return LtConfig{}; }) == entry);
  std::remove(path.c_str());
  table.configure("contract/pins", false);
}

TEST_CASE("a bucketed pin is written compactly: each kernel once, buckets by index, a line each",
          "[pins]") {
  // Three buckets, two kernels: the first kernel serves [1,8] and [17,inf).
  nlohmann::json entry = bucketed_entry(4096, 71);
  entry["buckets"] = {{{"min_rows", 1}, {"max_rows", 8}, {"config", config_json(66, 1)}},
                      {{"min_rows", 9}, {"max_rows", 16}, {"config", config_json(71, 1)}},
                      {{"min_rows", 17}, {"config", config_json(66, 1)}}};
  const PinEntry parsed = parse_pin_document(document({entry}), "pins.json").front();
  const nlohmann::json compact = parsed.to_json();
  REQUIRE(compact["configs"].size() == 2);
  CHECK(compact["buckets"][0]["config"] == 0);
  CHECK(compact["buckets"][1]["config"] == 1);
  CHECK(compact["buckets"][2]["config"] == 0);
  CHECK(parsed.table_fingerprint.size() == 16);
  // The compact form parses to the same table, with the same fingerprint.
  const PinEntry again = parse_pin_document(document({compact}), "again.json").front();
  for (std::int64_t m : {1, 8, 9, 16, 17, 100000}) {
    CHECK(again.config_for_rows(m).same_kernel(parsed.config_for_rows(m)));
  }
  CHECK(again.table_fingerprint == parsed.table_fingerprint);
  // A different table has a different fingerprint.
  nlohmann::json other = entry;
  other["buckets"][1]["max_rows"] = 15;
  other["buckets"][2]["min_rows"] = 16;
  CHECK(parse_pin_document(document({other}), "pins.json").front().table_fingerprint !=
        parsed.table_fingerprint);
  // The file text: a bucket and a configuration per line, and it reads back as the same document.
  const std::string text = pin_file_text(document({compact}));
  CHECK(text.find("{\"config\": 1, \"max_rows\": 16, \"min_rows\": 9}") != std::string::npos);
  CHECK(text.find("\"algo_id\": 71, ") != std::string::npos);
  CHECK(nlohmann::json::parse(text) == document({compact}));
}

TEST_CASE("malformed bucketed pins are BadInput naming the JSON path", "[pins]") {
  nlohmann::json compact =
      parse_pin_document(document({bucketed_entry(4096, 71)}), "p.json").front().to_json();
  nlohmann::json out_of_range = compact;
  out_of_range["buckets"][1]["config"] = 2;
  expect_bad_input(document({out_of_range}), "$.pins[0].buckets[1].config",
                   "an integer in [0, 1], got 2");
  nlohmann::json no_list = compact;
  no_list.erase("configs");
  expect_bad_input(document({no_list}), "$.pins[0].buckets[0].config", "no \"configs\" list");
  nlohmann::json single_with_list = {{"key", key_json(6144)},
                                     {"config", config_json(66, 1)},
                                     {"configs", nlohmann::json::array()}};
  expect_bad_input(document({single_with_list}), "$.pins[0].configs", "no configs list");

  nlohmann::json gap = bucketed_entry(4096, 71);
  gap["buckets"][1]["min_rows"] = 66;
  expect_bad_input(document({gap}), "$.pins[0].buckets", "starts at 66, expected 65");

  nlohmann::json bounded = bucketed_entry(4096, 71);
  bounded["buckets"][1]["max_rows"] = 8192;
  expect_bad_input(document({bounded}), "$.pins[0].buckets", "the last bucket must be unbounded");

  nlohmann::json both = bucketed_entry(4096, 71);
  both["config"] = config_json(66, 1);
  expect_bad_input(document({both}), "$.pins[0]", "exactly one of");

  nlohmann::json neither = {{"key", key_json(4096)}};
  expect_bad_input(document({neither}), "$.pins[0]", "exactly one of");

  nlohmann::json no_class = bucketed_entry(4096, 71);
  no_class.erase("bit_class");
  try {
    parse_pin_document(document({no_class}), "pins.json");
    FAIL("accepted a bucketed pin without its bit-class");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.json_path() == "$.pins[0].bit_class");
  }

  nlohmann::json bad_config = bucketed_entry(4096, 71);
  bad_config["buckets"][0]["config"].erase("algo_id");
  expect_bad_input(document({bad_config}), "$.pins[0].buckets[0].config", "algo_id");

  nlohmann::json empty = bucketed_entry(4096, 71);
  empty["buckets"] = nlohmann::json::array();
  CHECK_THROWS_AS(parse_pin_document(document({empty}), "pins.json"), bitcheck::BadInput);
}

TEST_CASE("merging a pin entry replaces its key and keeps every other entry", "[pins]") {
  nlohmann::json single = {
      {"key", key_json(6144)}, {"config", config_json(66, 1)}, {"measured", {{"note", "kept"}}}};
  std::string path = write_temp("merge-pins", document({single, bucketed_entry(4096, 71)}));

  merge_pin_entry(path, bucketed_entry(4096, 72));  // same key: replaced in place
  auto entries = parse_pin_document(bitcheck::load_json_file(path), path);
  REQUIRE(entries.size() == 2);
  CHECK(entries[1].config_for_rows(1).algo_id == 72);
  CHECK(entries[0].measured["note"] == "kept");

  // Written compactly whatever form it came in: the configurations listed once, buckets by index.
  const nlohmann::json written = bitcheck::load_json_file(path)["pins"][1];
  CHECK(written["configs"].size() == 2);
  CHECK(written["buckets"][0]["config"] == 0);
  CHECK(written["buckets"][1]["config"] == 1);

  merge_pin_entry(path, bucketed_entry(28672, 73));  // new key: appended
  entries = parse_pin_document(bitcheck::load_json_file(path), path);
  REQUIRE(entries.size() == 3);
  CHECK(entries[2].key.n == 28672);

  nlohmann::json broken = bucketed_entry(4096, 74);
  broken["buckets"][0]["min_rows"] = 2;
  CHECK_THROWS_AS(merge_pin_entry(path, broken), bitcheck::BadInput);
  CHECK(parse_pin_document(bitcheck::load_json_file(path), path)[1].config_for_rows(1).algo_id ==
        72);  // untouched

  std::remove(path.c_str());
  std::string fresh = "/tmp/bitcheck-test-fresh-pins.json";
  std::remove(fresh.c_str());
  merge_pin_entry(fresh, bucketed_entry(4096, 71));  // no file yet: created with the one entry
  CHECK(parse_pin_document(bitcheck::load_json_file(fresh), fresh).size() == 1);
  std::remove(fresh.c_str());
}
TEST_CASE("a pin directory keeps one file per key and round-trips a table", "[pins]") {
  test_support::TempDir dir;
  const std::string pins = dir / "pins";  // not there yet: created by the first write
  const nlohmann::json single = {{"key", key_json(6144)}, {"config", config_json(66, 1)}};
  merge_pin_entry(pins, bucketed_entry(4096, 71));
  merge_pin_entry(pins, single);
  merge_pin_entry(pins, bucketed_entry(4096, 72));  // same key: replaced in its own file

  std::vector<std::string> files;
  for (const auto& item : std::filesystem::directory_iterator(pins))
    files.push_back(item.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"sm90-lt13.1-bf16-forward-N4096-K4096.json",
                                          "sm90-lt13.1-bf16-forward-N6144-K4096.json"});

  // Reading the directory gives exactly the entries written, each with its own file as source.
  const std::vector<PinEntry> written = {
      parse_pin_document(document({bucketed_entry(4096, 72)}), "a").front(),
      parse_pin_document(document({single}), "b").front()};
  const std::vector<PinEntry> read = read_pin_entries(pins);
  REQUIRE(read.size() == 2);
  for (std::size_t i = 0; i < read.size(); ++i) {
    CHECK(read[i].to_json() == written[i].to_json());
    CHECK(read[i].table_fingerprint == written[i].table_fingerprint);
    CHECK(read[i].source == "pin file " + pins + "/" + files[i]);
  }

  // A derived pin is written back into its own key's file, the others stay as they were.
  PinTable& table = PinTable::instance();
  table.configure(pins, true);
  PinKey derived{"sm_90", 130100, "bf16", "input_grad", 4096, 4096, 0};
  table.lookup(derived, [] {
    LtConfig config;
    config.algo_id = 9;
    return config;
  });
  table.write_back_if_requested();
  table.configure("contract/pins", false);
  const std::vector<PinEntry> after = read_pin_entries(pins);
  REQUIRE(after.size() == 3);
  CHECK(std::filesystem::exists(pins + "/sm90-lt13.1-bf16-input_grad-N4096-K4096.json"));
  CHECK(after[2].key == derived);
  CHECK(after[2].config.algo_id == 9);
  CHECK(after[0].to_json() == written[0].to_json());

  // A key in a file named for another key is refused, naming the file.
  std::filesystem::copy_file(pins + "/" + files[0], pins + "/sm90-lt13.1-bf16-forward-N1-K1.json");
  try {
    read_pin_entries(pins);
    FAIL("accepted a key in another key's file");
  } catch (const bitcheck::BadInput& error) {
    CHECK(error.file() == pins + "/sm90-lt13.1-bf16-forward-N1-K1.json");
    CHECK(error.expected().find(files[0]) != std::string::npos);
  }
}

TEST_CASE("the committed pin directory holds every key once, each in its own file", "[pins]") {
  const std::string pins = std::string(BITCHECK_SOURCE_DIR) + "/contract/pins";
  const std::vector<PinEntry> entries = read_pin_entries(pins);
  CHECK(entries.size() == 33);
  std::size_t bucketed = 0;
  for (const auto& entry : entries) {
    CHECK(entry.source == "pin file " + pins + "/" + pin_file_name(entry.key));
    bucketed += entry.buckets.empty() ? 0 : 1;
  }
  CHECK(bucketed == 5);
}
#endif
