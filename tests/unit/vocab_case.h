// Test support for the vocabulary ops (embedding, lm_head, logprob, lm_head_logprob): one world
// (registry + embedded contract), a case builder over every default layout, and a verdict text.
#pragma once
#include <string>

#include "bitcheck/contract.h"
#include "bitcheck/layout.h"
#include "bitcheck/runner.h"

namespace vocab_test {

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
                                    std::int64_t rows) {
  bitcheck::CaseSpec spec;
  spec.op = op;
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = bitcheck::to_string(dtype);
  spec.pass = pass;
  spec.dims = std::move(dims);
  spec.rows = rows;
  spec.seed = 5;
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
    text += " {" + accuracy.tensor + " " + std::to_string(accuracy.max_abs_error) + "}";
  }
  return text;
}

// A registry holding `op` with its target/ids input drawn from [0, 2V) instead of [0, V), so
// some ids are out of range: the impls must refuse them with an error naming the id.
inline bitcheck::Registry out_of_range_registry(const std::string& op,
                                                void (*register_impls)(bitcheck::Registry&),
                                                const std::string& backend) {
  bitcheck::Registry registry;
  bitcheck::OpDef def = *world().registry.find_op(op);
  auto tensors = def.tensors;
  def.tensors = [tensors](const bitcheck::CaseSpec& spec) {
    auto decls = tensors(spec);
    for (auto& decl : decls) {
      if (decl.generator == bitcheck::Generator::index) decl.index_bound *= 2;
    }
    return decls;
  };
  registry.add_op(std::move(def));
  registry.set_backend_status(backend, world().registry.backend_available(backend),
                              world().registry.backend_reason(backend));
  register_impls(registry);
  return registry;
}

}  // namespace vocab_test
