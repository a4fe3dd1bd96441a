// validation/predict.h: the simulator's side of `poseidon validate`. A configuration's predicted
// pace, measured from the simulator's own trace as the live runs are from theirs
// (validation/trace_pace.h).
//
// A simulation that draws (which connections a full queue's losses hit, with loss_packet_bytes;
// jitter) is one realisation of a random process, as each live run is one. With `seeds` > 1 the
// configuration is simulated with its scenario's seed and the seeds after it. The prediction is
// the run whose pace is the median (the lower middle one for an even count), so one draw does not
// stand for the process. One seed is the simulation as it always was.
//
//   Prediction p = Predict(c.sim_scenario, c.scenario, 5, "out/validate/config-3");
//   // p.pace: the median run's; p.seed: its seed; p.seed_means_ms: every seed's, in seed order;
//   // out/validate/config-3/sim.json: the median run's timeline; sim-windows.txt: its
//   // congestion windows (sim/window_report.h), to read beside analysis/tcp_trace.py's
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "core/job.h"
#include "core/types.h"
#include "validation/trace_pace.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {

// A compute task's simulated duration, by actor, device, clock and name (TaskKey).
using TaskDurations = std::map<std::string, core::TimeNs>;
std::string TaskKey(const TraceRecord& e);

struct Prediction {
  Pace pace;                          // not ok: why the simulator could not run it
  uint64_t seed = 0;                  // the seed of the run taken
  std::vector<double> seed_means_ms;  // every seed's mean iteration time, in seed order
  TaskDurations tasks;                // the run taken: its compute tasks' durations
  // The run taken: the CPU its emulated hosts' model booked for the job's processes per measured
  // iteration (ms; validation/cpu_window.h); NaN on hosts that are not emulated.
  double booked_cpu_ms = NAN;
};

// `sim`: the scenario the simulator runs (with --sim-set); `measured_as`: the configuration as it
// ran live, whose workers, warm-up, iterations and consistency the pace is measured with.
// `seeds` >= 1. Writes the run taken to DIR/sim.json and its windows to DIR/sim-windows.txt. A
// ConfigError from the simulator comes back as a pace that is not ok.
Prediction Predict(const config::ScenarioSpec& sim, const config::ScenarioSpec& measured_as,
                   int seeds, const std::string& dir);

// How late a live run's emulated hosts ran their compute against the prediction: over its compute
// tasks that the simulated run also has (TaskKey), live duration - simulated duration (us). A
// replayed task sleeps its profile time, so what it took beyond the simulated time is a late
// wake-up or a CPU it waited for. `median_us`: over every process's tasks (the faithfulness
// rule's, validation/host_load.h); `latest_host_us`: the largest of each process's own medians,
// and whose it is (`layout`'s name, "worker 1"), reported beside it: under BSP one late worker
// sets the job's pace. NAN and no name when no task matched.
struct TaskLateness {
  double median_us = NAN;
  double latest_host_us = NAN;
  std::string latest_host;
};
TaskLateness LiveTaskLateness(const TaskDurations& simulated, const std::vector<TraceRecord>& live,
                              const core::JobLayout& layout);

// The index of the median of `values` (the lower middle one for an even count); `values` not
// empty.
size_t MedianIndex(const std::vector<double>& values);

}  // namespace poseidon::validation
