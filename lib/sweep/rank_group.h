// Cases at tp > 1 on a backend whose ranks are processes (CUDA with NCCL): a group of processes,
// one per rank, each on its own device, walks the same list of cases in step. Ranks [0, tp) of a
// case run its layouts together (every collective needs all of them); rank 0 checks the outputs
// and appends each case's entry to the group's results file. A rank that crashes, or a case that
// no rank finishes in time (a rank hung, or waits in a collective for one that died), makes that
// case `error`: the group is killed and a new one starts at the next case, so the sweep goes on
// and the report stays whole.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/printer.h"
#include "sweep/sweep.h"

namespace bitcheck {

// Whether a case runs in a group of rank processes (tp > 1 on a device backend).
bool needs_rank_group(const CaseSpec& c, const Registry& registry);

struct RankGroupRun {
  // Case entries, in the order of the cases given; when interrupted, only the finished ones.
  std::vector<nlohmann::json> results;
  nlohmann::json meta;  // size, devices, groups started, teams, faults, interrupted (when stopped)
};

// A list of cases for groups of `group_size` ranks on `devices`, one group after another.
struct RankTeam {
  int group_size = 0;
  std::vector<std::string> devices;
  std::vector<CaseSpec> cases;
};
// The teams of run_rank_group, in phases run one after another, the teams of a phase side by side:
// largest group size first; the cases of each size (a case's tp, or `size` when the tp is larger:
// the rank runner then skips the case with its reason) dealt in turn to as many groups of that
// size as `devices` holds. One phase of one team of `size` devices under srun (one Slurm step at a
// time) or when timing (groups side by side would share the host and its links).
std::vector<std::vector<RankTeam>> plan_rank_teams(const SweepOptions& options,
                                                   const std::vector<CaseSpec>& cases,
                                                   const std::vector<std::string>& devices,
                                                   int size);

// The parent: runs `cases` (all needing a rank group) on groups of rank processes, largest tp
// first: the cases of each tp on as many groups of that many devices as `options.devices` holds,
// side by side (on 4 GPUs the tp = 2 cases on two groups of 2 at once), a case whose tp exceeds
// the devices on a group of all of them (its ranks skip it with the reason). Under srun, and when
// timing (`options.rank_bench`), one group of the largest tp (or of every device, when fewer).
// Ranks' logs and results files live in `work_dir`. When `stop_requested` returns true (polled
// every 100 ms: a signal to the sweep), the ranks are killed and the run ends, interrupted.
RankGroupRun run_rank_group(const SweepOptions& options, const Registry& registry,
                            const std::vector<CaseSpec>& cases, const std::string& work_dir,
                            const std::function<bool()>& stop_requested = {});

// A rank of the group (`sweep --rank r/n --rank-dir DIR --rank-cases FILE`): joins the group,
// runs the cases FILE names in order, and as rank 0 appends each case's entry to DIR/results.jsonl.
int run_rank_worker(const SweepOptions& options, const Registry& registry);

}  // namespace bitcheck
