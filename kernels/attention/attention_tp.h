// Head-parallel attention (tensor parallelism): the heads and the KV heads split over tp ranks,
// each rank running a one-rank attention impl on its share of every row tensor. Nothing is reduced
// across the ranks, so every impl must give its tp = 1 bits at every tp: what such a case checks is
// the TP plumbing itself (the split, the grouped-query mapping within a rank, the gather).
#pragma once
#include <memory>
#include <vector>

#include "core/op.h"

namespace bitcheck::attention {

// A rank's case: H / tp heads and KVH / tp KV heads (the group size H / KVH unchanged).
CaseSpec rank_spec(const CaseSpec& spec, int tp);

// The head-parallel impl named `name` over `inner`: its passes, dtypes and description, claimed
// invariant at every tp with the heads and KV heads split, and `paths` (the inner impl's and the
// transport's).
ImplInfo head_parallel_info(const Impl& inner, std::string name, std::vector<PathDecl> paths);

// The head-parallel base: it runs `inner` (registered before it, for the same backend) on the
// ranks' shares. Every attention row tensor is head-major ([heads, D], [heads] for lse), so rank r
// holds the r-th of tp equal column blocks of each.
class HeadParallel : public Impl {
 public:
  HeadParallel(Impl& inner, std::string name, std::vector<PathDecl> paths)
      : Impl(head_parallel_info(inner, std::move(name), std::move(paths))), inner_(inner) {}
  std::optional<std::string> skip_reason(const CaseSpec& spec) const override {
    return inner_.skip_reason(rank_spec(spec, spec.tp));
  }
  std::size_t device_workspace_bytes(const CaseSpec& spec) const override {
    return inner_.device_workspace_bytes(rank_spec(spec, spec.tp));
  }
  std::vector<SwitchPoint> switch_points(const CaseSpec& spec,
                                         std::int64_t max_rows) const override {
    return inner_.switch_points(rank_spec(spec, spec.tp), max_rows);
  }

 protected:
  // Runs the inner impl on rank `rank`'s share of `batch` and returns that share's batch, its
  // outputs [slots, width / tp] each. The rank's layout state (a KV cache) lives in `batch`'s.
  Batch run_rank(Batch& batch, int rank);
  Impl& inner_;
};

// Copies each output of `share` (rank `rank`'s column block) into its place in `batch`'s outputs.
void place_share(const Batch& share, int rank, Batch& batch);

}  // namespace bitcheck::attention
