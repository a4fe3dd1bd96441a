// apps/poseidon/validate_command.h: `poseidon validate`, the simulator's prediction against a
// live run of the same configuration.
//
// For each configuration (a scenario, or every point of a sweep) it runs the job live with
// compute replayed from the scenario's profile (`launch --compute replay`, on an emulated
// cluster with `--emulate`) and in the simulator, and measures both the same way: from the
// workers' traces, T(w, v) is when worker w first holds every update of clocks 0..v-1 in every
// layer ("synced" events), and the job's iteration time is the pace of its slowest member, as
// sim/simulation.cc defines it. Reports measured and predicted iteration time (mean and spread
// over the measured iterations), the error, and the median and largest absolute error.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct ValidateOptions {
  std::string input;                   // scenario or sweep YAML
  std::vector<std::string> overrides;  // --set, on every configuration
  std::vector<std::string> sim_overrides;  // --sim-set: the simulator's side only (to check
                                           // that a wrong model is caught)
  std::string work_dir = "out/validate";
  std::string csv, json;               // outputs (csv default: stdout)
  bool emulate = true;                 // shaped network namespaces (root); false: loopback
  // Live runs per configuration (the simulation runs once: it is deterministic). Run r of every
  // configuration comes before run r + 1 of any, so that the runs of one configuration are
  // spread over the whole time the command takes. With repeat > 1 the CSV and JSON gain a `run`
  // column and the summary takes, per configuration, the median of its runs.
  int repeat = 1;
  // Run nothing live: compare the simulator with the live runs an earlier validate left in
  // work_dir (same input, --set and --repeat; checked against what each run recorded). For
  // trying a simulator setting (--sim-set) against the same measurements, without their noise.
  bool reuse_live = false;
  std::string netns_script;            // scripts/netns-run
};

int RunValidate(const ValidateOptions& o);

// The job's iteration time from traces (Chrome JSON as core/trace.h writes it; any number of
// files, each event attributed to its actor by its lane), as sim/simulation.cc computes it:
// mean = (max_w T(w, iterations) - max_w T(w, warmup)) / (iterations - warmup), std over the
// per-worker iterations. T(w, 0) is worker w's first begin; T(w, v) is when it first held every
// update of clocks 0..v-1 in every layer, or, with own_pace (SSP and ASP, where workers run at
// their own pace), when it ended iteration v-1. ok is false (and why says why) when some worker
// lacks an event the definition needs.
struct Pace {
  bool ok = false;
  std::string why;
  double mean_ms = 0, std_ms = 0;
};
Pace IterationPaceFromTraces(const std::vector<std::string>& traces, int num_workers,
                             int64_t warmup, int64_t iterations, bool own_pace);

// How far the live runs of one configuration differ among themselves: (max - min) / median of
// their measured iteration times, in percent; NaN with fewer than two runs. A configuration whose
// live runs spread by more than the error goal cannot meet it in every run, whatever the model.
double LiveSpreadPct(const std::vector<double>& measured_ms);

}  // namespace poseidon::app
