// Test support for the vocabulary ops (embedding, lm_head, logprob, lm_head_logprob): one world
// (registry + embedded contract), a case builder over every default layout, and a verdict text.
#pragma once
#include <string>

#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"
#include "unit/case_support.h"

namespace vocab_test {

using case_support::describe;
using case_support::run;
using case_support::world;

// This family's cases use seed 5.
inline bitcheck::CaseSpec make_case(const std::string& op, const std::string& impl,
                                    bitcheck::DType dtype, bitcheck::Pass pass, bitcheck::Dims dims,
                                    std::int64_t rows) {
  return case_support::make_case(op, impl, dtype, pass, std::move(dims), rows, 5);
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
      if (decl.generator == bitcheck::Generator::token_id) decl.index_bound *= 2;
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
