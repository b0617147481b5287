// all_reduce: the sum of one contribution per rank, every rank receiving the whole sum. A case at
// tp = P is its own canonical (OpDef::tp_in_math): the op's math is defined per rank count.
#include "all_reduce/all_reduce.h"

#include "common/collective.h"

namespace bitcheck {
namespace {
void definition(Registry& registry) {
  register_collective_op(registry, Collective::all_reduce);
}
void cpu(Registry& registry) {
  register_collective_cpu(registry, Collective::all_reduce);
}
#if BITCHECK_HAVE_CUDA
void cuda(Registry& registry) {
  register_collective_cuda(registry, Collective::all_reduce);
}
#endif
}  // namespace

void register_all_reduce(Registry& registry, OpPart part) {
  register_op_part(registry, part, {definition, cpu, BITCHECK_CUDA_PART(cuda)});
}

}  // namespace bitcheck
