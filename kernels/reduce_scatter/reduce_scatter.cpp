// reduce_scatter: the sum of one contribution per rank, rank r receiving the r-th part of the
// message (gathered back for the check). A case at tp = P is its own canonical
// (OpDef::tp_in_math): the op's math is defined per rank count.
#include "reduce_scatter/reduce_scatter.h"

#include "common/collective.h"

namespace bitcheck {
namespace {
void definition(Registry& registry) {
  register_collective_op(registry, Collective::reduce_scatter);
}
void cpu(Registry& registry) {
  register_collective_cpu(registry, Collective::reduce_scatter);
}
#if BITCHECK_HAVE_CUDA
void cuda(Registry& registry) {
  register_collective_cuda(registry, Collective::reduce_scatter);
}
#endif
}  // namespace

void register_reduce_scatter(Registry& registry, OpPart part) {
  register_op_part(registry, part, {definition, cpu, BITCHECK_CUDA_PART(cuda)});
}

}  // namespace bitcheck
