// The CUDA head-parallel attention: fixed-order on each rank process's heads, every output's
// column blocks all-gathered through NCCL (an exact copy) into the whole rows (attention_tp.h).
#include <cstring>
#include <memory>

#include "attention/attention.h"
#include "attention/attention_tp.h"
#include "common/adapter_support.h"
#include "common/nccl_ranks.h"
#include "common/rank_sum_cuda.h"

namespace bitcheck {
namespace {

class HeadParallelCuda : public attention::HeadParallel {
 public:
  using HeadParallel::HeadParallel;

  void run(Batch& batch) override {
    const int rank = batch.tp > 1 ? nccl::group().rank : 0;
    const Batch share = run_rank(batch, rank);
    for (auto& [name, whole] : batch.outputs) {
      const cuda::DeviceBuffer block = cuda_support::upload(share.outputs.at(name));
      const Tensor gathered = cuda_tp::gather_column_shares(block, batch.tp, whole.rows(),
                                                            whole.row_size(), whole.dtype());
      std::memcpy(whole.data(), gathered.data(), whole.bytes());
    }
  }
};

}  // namespace

void register_attention_tp_cuda(Registry& registry) {
  Impl* inner = registry.find_impl("attention", "fixed-order");
  std::vector<PathDecl> paths = inner->paths();
  paths.push_back(cuda_tp::nccl_choices(true));  // the outputs' all-gathers
  registry.add_impl("attention", std::make_unique<HeadParallelCuda>(*inner, "tp-heads-fixed-order",
                                                                    std::move(paths)));
}

}  // namespace bitcheck
