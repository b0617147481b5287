// Child sweeps of this binary: the command line that repeats a sweep's spec and filters in a child
// (a shard of --devices, a rank of a group), and starting one with its own environment and log.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "sweep/sweep.h"

namespace bitcheck {

// `binary sweep` with the options that choose the cases (spec, contract, filters, overrides,
// external impls, pins, limits); the caller adds what places the child (shard, rank, --out).
std::vector<std::string> sweep_child_args(const SweepOptions& options, const std::string& binary);

// The variables every child that may touch several GPUs gets: NVLink multicast (NVLS) and SHARP
// stay off, whatever the parent's environment says.
std::vector<std::pair<std::string, std::string>> multi_gpu_safe_environment();

// Starts `args` in its own process group (a terminal's Ctrl-C reaches only the parent), with
// `environment` set and stdout and stderr into `log_path`. Everything is prepared before fork.
pid_t spawn_child(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& environment,
                  const std::string& log_path);

// The last `lines` lines of a log, each indented by four spaces.
std::string log_tail(const std::string& log_path, std::size_t lines);

// "exit N" or "killed by signal N" for an exit code that is -N when a signal ended the child.
std::string exit_text(int exit_code);

}  // namespace bitcheck
