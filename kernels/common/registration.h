// How an op registers itself: one register_<op>(registry, part) per op, listed once in the
// manifest (kernels/manifest.cpp), which calls every op for each part in turn, so that each part
// sees what the parts before it registered; and register_impls, an op's impls as one table.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/op.h"

namespace bitcheck {

enum class OpPart {
  definition_and_cpu,  // the OpDef (tensors, FP32 reference, shape checks) and the CPU impls
  cuda,                // the CUDA impls (a CPU-only build has none)
  composed,            // impls composed of other ops' impls (the chain's), registered last
};

using RegisterFunction = void (*)(Registry&);

// The registration functions of one op's parts; nullptr where the op has no such part.
struct OpRegistration {
  RegisterFunction definition = nullptr;
  RegisterFunction cpu = nullptr;
  RegisterFunction cuda = nullptr;
  RegisterFunction composed = nullptr;
};

// Registers one impl of `op` per row: ImplClass(info, variant), where the variant is what the
// class's run() reads (a kind, a flag) and the info what the impl is.
template <typename ImplClass, typename Variant>
void register_impls(Registry& registry, const std::string& op,
                    const std::vector<std::pair<ImplInfo, Variant>>& impls) {
  for (const auto& [info, variant] : impls)
    registry.add_impl(op, std::make_unique<ImplClass>(info, variant));
}

inline void register_op_part(Registry& registry, OpPart part, const OpRegistration& op) {
  RegisterFunction functions[2] = {nullptr, nullptr};
  switch (part) {
    case OpPart::definition_and_cpu:
      functions[0] = op.definition;
      functions[1] = op.cpu;
      break;
    case OpPart::cuda:
      functions[0] = op.cuda;
      break;
    case OpPart::composed:
      functions[0] = op.composed;
      break;
  }
  for (RegisterFunction function : functions) {
    if (function) function(registry);
  }
}

}  // namespace bitcheck

// An op's CUDA registration function in a CUDA build, nullptr in a CPU-only build (where the CUDA
// adapters, *_cuda.cpp, are not compiled).
#if BITCHECK_HAVE_CUDA
#define BITCHECK_CUDA_PART(function) function
#else
#define BITCHECK_CUDA_PART(function) nullptr
#endif
