// Runs one case: generates the logical inputs, executes the impl under every layout, and applies
// the three checks (invariance as bits, determinism, accuracy against the FP32 reference).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/phase_profile.h"
#include "core/verdict.h"
#include "run/compare.h"
#include "spec/contract.h"

namespace bitcheck {

struct CaseTimings {
  double impl_seconds = 0;       // impl runs, all layouts and repeats
  double reference_seconds = 0;  // FP32 reference
  double compare_seconds = 0;    // bitwise and accuracy comparisons
  double inputs_seconds = 0;     // input generation
  double total_seconds = 0;
  // The process's peak resident set during the case (core/host_memory.h); 0: not measured.
  std::uint64_t host_peak_bytes = 0;
  // The same time by phase with the bytes each moved; the impl runs split into staging, uploads,
  // impl calls, downloads and bookkeeping.
  PhaseProfile profile;
};

struct CaseResult {
  CaseSpec spec;
  Verdict verdict = Verdict::skipped;
  std::string reason;  // skip reason or error text
  std::string backend;
  bool is_control = false;
  bool expected_to_drift = false;
  bool is_observation = false;  // a library default: what it did is observed, never a failure
  // A control whose drift comes from a switch point (Impl::switch_points) and whose case stays
  // below the first one (alone runs 1 row, the other layouts at most spec.rows): the batch that
  // reaches it. Such a case had no chance to drift. 0 for every other case.
  std::int64_t drift_needs_rows = 0;
  std::vector<std::string> layouts_run;
  // Layouts of the case the impl could not run, with the reason (the graph layout on the CPU
  // backend, or for an impl that cannot be captured).
  std::map<std::string, std::string> skipped_layouts;
  std::vector<DriftMetrics> drift;  // layout comparisons that differ
  // A case at tp > 1 whose impl does not claim the same bits across TP sizes: its canonical layouts
  // against the same layouts at tp = 1 where they differ (reported, never a failure).
  std::vector<DriftMetrics> cross_tp_drift;
  std::int64_t layout_comparisons = 0;       // comparisons made (tensor x layout)
  std::vector<DriftMetrics> nondeterminism;  // canonical repeats that differ
  std::vector<AccuracyMetrics> accuracy;     // one per output tensor
  std::string fingerprint;                   // hash of the canonical output bits
  nlohmann::json impl_config;
  // The launch paths each layout's calls took (every invocation and repeat), sorted.
  std::map<std::string, std::vector<std::string>> paths;
  // With provenance: the kernels each layout's calls launched (distinct launches, first-run order).
  std::map<std::string, std::vector<KernelUse>> kernels;
  CaseTimings timings;
};

// Everything a repro needs to dump: logical inputs, canonical and per-layout outputs, reference.
struct CaseArtifacts {
  std::map<std::string, Tensor> inputs;  // logical rows, in order
  std::map<std::string, std::map<std::string, Tensor>>
      layout_outputs;                       // layout -> tensor -> logical
  std::map<std::string, Tensor> reference;  // rows as in reference_rows
  std::vector<std::int64_t> reference_rows;
};

class Runner {
 public:
  Runner(const Registry& registry, const Contract& contract);
  ~Runner();
  CaseResult run_case(const CaseSpec& spec, CaseArtifacts* artifacts = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace bitcheck
