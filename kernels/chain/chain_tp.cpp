// The chain at tp = P: which TP impl each call site runs in each TP variant of the chain, and what
// the variant claims, taken from the TP impls it is built from.
#include <algorithm>

#include "chain/chain.h"

namespace bitcheck::chain {
namespace {

// One TP variant: the order of its sums across ranks ("<prefix>tp-row-<order>" and the rest), the
// embedding's (whose impls do not come in every order) and the backend it runs on.
struct TpVariant {
  const char* backend;
  const char* prefix;  // of the TP impls' names on the backend: "cpu-" or ""
  const char* order;
  const char* embedding_order;
};

constexpr TpVariant variants[] = {
    {"cpu", "cpu-", "fixed-order", "fixed-order"},
    {"cpu", "cpu-", "rank-chain", "rank-chain"},
    {"cpu", "cpu-", "early-rounding", "fixed-order"},
    {"cuda", "", "fixed-order", "fixed-order"},
    {"cuda", "", "nccl-default", "nccl-default"},
    {"cuda", "", "nccl-tree-simple", "nccl-tree-simple"},
    {"cuda", "", "early-rounding", "fixed-order"},
};

// The chain's dims that the TP impls split: the heads (attention, qkv's N, o_proj's K), I
// (gate/up's N, down's K) and V (the embedding, the LM head and logprob).
const std::vector<std::string> split_dims = {"heads", "kv_heads", "I", "V"};

struct Site {
  const char* site;
  const char* op;
  const char* split;  // the TP impl's name between "tp-" and its order
};

constexpr Site tp_sites[] = {
    {"embed", "embedding", "vocab-"}, {"qkv", "matmul", "column-"},     {"attn", "attention", ""},
    {"o_proj", "matmul", "row-"},     {"gate_up", "matmul", "column-"}, {"down", "matmul", "row-"},
    {"lm_head", "lm_head", "vocab-"}, {"logprob", "logprob", "vocab-"},
};

std::string impl_name(const TpVariant& variant, const Site& site) {
  const std::string prefix = std::string(variant.prefix) + "tp-";
  if (std::string(site.op) == "attention") return prefix + "heads-fixed-order";
  const char* order = std::string(site.op) == "embedding" ? variant.embedding_order : variant.order;
  return prefix + site.split + order;
}

// The component paths as "<op>:<path>" (informative: the components' own sweeps require them),
// each once.
std::vector<PathDecl> component_paths(const std::map<std::string, Impl*>& base,
                                      const std::map<std::string, Impl*>& sites) {
  std::vector<std::pair<std::string, const Impl*>> components;
  for (const Site& site : tp_sites) components.emplace_back(site.op, sites.at(site.site));
  for (const auto& [op, impl] : base) {
    const bool split = std::any_of(std::begin(tp_sites), std::end(tp_sites),
                                   [&](const Site& site) { return op == site.op; });
    if (!split) components.emplace_back(op, impl);
  }
  std::vector<PathDecl> paths;
  for (const auto& [op, impl] : components) {
    for (PathDecl decl : impl->paths()) {
      decl.name = op + ":" + decl.name;
      const bool known = std::any_of(paths.begin(), paths.end(),
                                     [&](const PathDecl& path) { return path.name == decl.name; });
      if (known) continue;
      decl.description = op + "/" + impl->name() + ": " + decl.description;
      paths.push_back(decl.informative());
    }
  }
  return paths;
}

// The variant's ImplInfo: what its row-parallel sum is (the first sum across ranks of the
// forward), on ranks up to the smallest limit of its components, a control drifting in the passes
// where any of its controls does.
ImplInfo variant_info(const TpVariant& variant, const std::map<std::string, Impl*>& base,
                      const std::map<std::string, Impl*>& sites) {
  const Impl& row = *sites.at("o_proj");
  ImplInfo info = row.info();
  info.name = std::string(variant.prefix) + "tp-" + variant.order;
  info.description = std::string(row.claims_invariance() ? "" : "control: ") +
                     "the decoder stack at tp = P, summing across ranks as matmul/" + row.name() +
                     " does: heads split (attention/" + sites.at("attn")->name() +
                     "), qkv and gate/up column-parallel (matmul/" + sites.at("qkv")->name() +
                     "), o_proj and down row-parallel (matmul/" + row.name() +
                     "), the embedding, LM head and logprob vocab-parallel (embedding/" +
                     sites.at("embed")->name() + ", lm_head/" + sites.at("lm_head")->name() +
                     ", logprob/" + sites.at("logprob")->name() + "); the rest as the chain " +
                     base.begin()->second->name() + ": " + row.description();
  info.passes = {Pass::forward, Pass::backward};
  info.dtypes = {};
  info.drifts_in = {};
  info.bench_baseline.clear();  // the row-parallel matmul's, not a chain impl
  int max_tp = max_tensor_parallel;
  for (const auto& [site, impl] : sites) {
    max_tp = std::min(max_tp, impl->tensor_parallelism().max_tp);
    if (impl->claims_invariance() || impl->is_library_default()) continue;
    for (Pass pass : impl->info().drifts_in) {
      if (std::find(info.drifts_in.begin(), info.drifts_in.end(), pass) == info.drifts_in.end())
        info.drifts_in.push_back(pass);
    }
  }
  info.tensor_parallelism.split_dims = split_dims;
  info.tensor_parallelism.max_tp = max_tp;
  info.paths = component_paths(base, sites);
  return info;
}

}  // namespace

std::vector<TpChain> tp_chains(const Registry& registry, const std::string& backend,
                               const std::map<std::string, Impl*>& base) {
  std::vector<TpChain> chains;
  for (const TpVariant& variant : variants) {
    if (backend != variant.backend) continue;
    std::map<std::string, Impl*> sites;
    for (const Site& site : tp_sites) {
      Impl* impl = registry.find_impl(site.op, impl_name(variant, site));
      if (impl && impl->backend() == backend && impl->tensor_parallelism().max_tp > 1)
        sites[site.site] = impl;
    }
    if (sites.size() != std::size(tp_sites)) continue;  // a TP impl of the backend is not built
    chains.push_back(TpChain{variant_info(variant, base, sites), std::move(sites)});
  }
  return chains;
}

}  // namespace bitcheck::chain
