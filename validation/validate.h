// validation/validate.h: `poseidon validate`, the simulator's prediction against a live run of
// the same configuration.
//
//   ValidateOptions o;
//   o.input = "scenarios/validation/matrix.yaml";
//   o.repeat = 3;
//   return RunValidate(o);   // CSV on stdout (or o.csv), summary on stderr
//
// For each configuration (a scenario, or every point of a sweep) it runs the job live with
// compute replayed from the scenario's profile (`launch --compute replay`, on an emulated
// cluster with `emulate`) and in the simulator, and measures both the same way: from the
// workers' traces (validation/trace_reader.h), the job's iteration time as core/pace.h defines
// it (validation/trace_pace.h). Reports measured and predicted iteration time (mean and spread
// over the measured iterations), the error, the network model's error on the run's own traffic
// (validation/network_replay.h), and the median and largest absolute error
// (validation/summary.h), then the testbed's keys it charged and where they came from
// (validation/testbed_keys.h). Each live run records what the host did meanwhile (DIR/host.txt) and
// is judged a faithful emulation or not by one rule (validation/host_load.h); the CSV and JSON
// say so per run, the summary reports the faithful runs apart and lists the others with why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/scenario.h"

namespace poseidon::validation {

// A live run's replayed compute draws the scenario's jitter as the simulator does (cost/jitter.h),
// each run with a seed of its own, none of the simulator's: run r (from 1) of a configuration whose
// scenario has jitter runs with seed = the scenario's + kLiveJitterSeedOffset + r, where the
// simulator's --sim-seeds N take the scenario's seed and the N - 1 after it.
inline constexpr uint64_t kLiveJitterSeedOffset = 100;

// The --set a live run of a configuration gets: the configuration's own, and with jitter its run's
// seed (recorded with the run, so --reuse-live refuses a run made with another seed, or made
// before the replay drew jitter at all).
std::vector<std::string> LiveOverrides(const std::vector<std::string>& overrides,
                                       const config::ScenarioSpec& s, int run);

struct ValidateOptions {
  std::string input;                   // scenario or sweep YAML
  std::vector<std::string> overrides;  // --set, on every configuration
  std::vector<std::string> sim_overrides;  // --sim-set: the simulator's side only (to check
                                           // that a wrong model is caught)
  std::string work_dir = "out/validate";
  std::string csv, json;               // outputs (csv default: stdout)
  bool emulate = true;                 // shaped network namespaces (root); false: loopback
  // Live runs per configuration (the simulation runs once per seed: it is deterministic). Run r of
  // every configuration comes before run r + 1 of any, so that the runs of one configuration are
  // spread over the whole time the command takes. With repeat > 1 the CSV and JSON gain a `run`
  // column and the summary takes, per configuration, the median of its runs.
  int repeat = 1;
  // Run nothing live: compare the simulator with the live runs an earlier validate left in
  // work_dir (same input, --set and --repeat; checked against what each run recorded). For
  // trying a simulator setting (--sim-set) against the same measurements, without their noise.
  bool reuse_live = false;
  // With reuse_live: a run with no recorded live run, or one recorded for another configuration
  // (another input or --set; a jittered configuration's run made before the live replay drew
  // jitter), is run live instead of failing. Resumes an interrupted validate, or renews the stale
  // runs of a set while keeping the others.
  bool run_missing = false;
  std::string netns_script;            // scripts/netns-run
  // Every live run is sampled (validation/host_load.h) and judged a faithful emulation or not.
  // Before each live run, wait until the host is quiet, for at most this many seconds (0: do not
  // wait); a host still busy then is said so and the run goes ahead (and is judged).
  double wait_quiet_s = 0;
  // A live run judged not faithful is run again, up to this many times; the last one counts.
  int rerun_disturbed = 0;
  // After `repeat` runs, a configuration whose runs not judged disturbed differ among themselves
  // by more than the 8% goal ((max - min) / median, Tally::SpreadBeyondGoal) is run again, in
  // further rounds, up to this many runs in all; its median then stands on more runs. The rule
  // reads the live runs alone, never the prediction. 0: off (needs repeat >= 2 and a count above
  // it otherwise).
  int repeat_spread = 0;
  // The emulated hosts' CPU keys on the simulator's side (validation/testbed_keys.h): "files"
  // (the network files' own), "measure" (measured on this host before predicting, written to
  // WORK_DIR/testbed_keys.yaml), "latencies" (the wake-up and hand-off latencies alone, measured
  // likewise) or the path of a testbed keys file measured earlier. Whichever,
  // the summary says which keys were charged, where they came from and what the live runs
  // showed of the wake-up and hand-off.
  std::string testbed_keys = "files";
  // Seeds each configuration is simulated with (the scenario's seed and those after it); the
  // prediction is the run with the median pace (validation/predict.h). A simulation that draws
  // (losses at a full queue, jitter) is one realisation of a random process, as each live run is.
  // 1: the scenario's seed alone, as before.
  int sim_seeds = 1;
  std::string command;  // the command line, for the provenance of measured keys
};

// Runs every configuration; returns 0, 1 when some run could not be compared, 130 when
// interrupted. Throws config::ConfigError for bad input (the input file, --repeat, the work
// folder).
int RunValidate(const ValidateOptions& o);

}  // namespace poseidon::validation
