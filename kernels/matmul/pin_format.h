// What every build knows of the pinned matmul's pin files (no cuBLASLt): the readable name of a pin
// key, which is also its file's name in a pin directory, and the M buckets of a bucketed pin.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bitcheck {

// The readable name of a pin key (the pin-file key object), also the stem of its file in a pin
// directory: "sm90-lt13.1-bf16-forward-N4096-K14336" (weight_grad: "...-T256").
std::string pin_key_name(const nlohmann::json& key);

// A range of row counts M, inclusive; max_rows == 0 means unbounded.
struct RowBucket {
  std::int64_t min_rows = 1;
  std::int64_t max_rows = 0;
  bool contains(std::int64_t rows) const {
    return rows >= min_rows && (max_rows == 0 || rows <= max_rows);
  }
  std::string label() const;  // "[33,48]", "[4097,inf)"
  bool operator==(const RowBucket& other) const {
    return min_rows == other.min_rows && max_rows == other.max_rows;
  }
};

// Why `buckets` do not cover every M >= 1 exactly once in increasing order, or nullopt.
std::optional<std::string> bucket_coverage_problem(const std::vector<RowBucket>& buckets);

}  // namespace bitcheck
