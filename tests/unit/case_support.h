// Shared test support for running single cases through the Runner: one world (registry + embedded
// contract), a case over every default layout, and a one-line description of a result.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "manifest.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"

namespace case_support {

// A [rows, n / rows] tensor of `dtype` from raw element bits, or from values rounded to `dtype`.
inline bitcheck::Tensor from_bits(bitcheck::DType dtype, std::int64_t rows,
                                  const std::vector<std::uint32_t>& bits) {
  bitcheck::Tensor tensor(dtype, {rows, static_cast<std::int64_t>(bits.size()) / rows});
  for (std::size_t i = 0; i < bits.size(); ++i)
    tensor.set_bits(static_cast<std::int64_t>(i), bits[i]);
  return tensor;
}

inline bitcheck::Tensor from_values(bitcheck::DType dtype, std::int64_t rows,
                                    const std::vector<float>& values) {
  bitcheck::Tensor tensor(dtype, {rows, static_cast<std::int64_t>(values.size()) / rows});
  for (std::size_t i = 0; i < values.size(); ++i)
    tensor.set(static_cast<std::int64_t>(i), values[i]);
  return tensor;
}

struct World {
  bitcheck::Registry registry;
  bitcheck::Contract contract;
  World() {
    bitcheck::register_all(registry);
    contract = bitcheck::load_embedded_contract(registry);
  }
};

inline World& world() {
  static World instance;
  return instance;
}

inline bitcheck::CaseSpec make_case(const std::string& op, const std::string& impl,
                                    bitcheck::DType dtype, bitcheck::Pass pass, bitcheck::Dims dims,
                                    std::int64_t rows, std::uint64_t seed) {
  bitcheck::CaseSpec spec;
  spec.op = op;
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = bitcheck::to_string(dtype);
  spec.pass = pass;
  spec.dims = std::move(dims);
  spec.rows = rows;
  spec.seed = seed;
  spec.layouts = bitcheck::known_layouts();
  return spec;
}

inline bitcheck::CaseResult run(const bitcheck::CaseSpec& spec,
                                const bitcheck::Registry& registry = world().registry) {
  bitcheck::Runner runner(registry, world().contract);
  return runner.run_case(spec);
}

inline std::string describe(const bitcheck::CaseResult& result) {
  std::string text = bitcheck::to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift) text += " [" + drift.layout + " " + drift.tensor + "]";
  for (const auto& accuracy : result.accuracy) {
    text += " {" + accuracy.tensor + " max_abs " + std::to_string(accuracy.max_abs_error) + "}";
  }
  return text;
}

}  // namespace case_support
