// Shared test support for running single cases through the Runner: one world (registry + embedded
// contract), a case over every default layout, and a one-line description of a result.
#pragma once
#include <cstdint>
#include <string>

#include "bitcheck/contract.h"
#include "bitcheck/layout.h"
#include "bitcheck/runner.h"

namespace case_support {

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

inline bitcheck::CaseSpec make_case(const std::string& op, const std::string& impl, bitcheck::DType dtype,
                                    bitcheck::Pass pass, bitcheck::Dims dims, std::int64_t rows,
                                    std::uint64_t seed) {
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
