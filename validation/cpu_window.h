// validation/cpu_window.h: the CPU a run's processes used over a span of the job's time base,
// read from the process CPU counters of its trace (core::ProcessCpuEvent): live, each process's
// own CPU clock; simulated, what the emulated hosts' model booked for it
// (SimJobConfig::record_host_cpu). Read over the span the pace is measured on, the two say
// whether the testbed's CPU keys (validation/testbed_keys.h) carry to this host for this job.
//
//   const double live_ms = CpuMsPerIteration(traces.all, pace, iterations - warmup);  // NaN: none
#pragma once

#include <optional>
#include <vector>

#include "core/types.h"
#include "validation/trace_pace.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {

struct WindowCpu {
  double ns = 0;      // summed over the processes
  int processes = 0;  // those with counters
};

// Each process's CPU so far at `begin` and at `end` (linear between its counters, the first
// counter's value before it and the last's after it; counters need not be in time order), the
// difference summed over processes. nullopt when no event is a counter, or end < begin.
std::optional<WindowCpu> ProcessCpuOver(const std::vector<TraceRecord>& events, core::TimeNs begin,
                                        core::TimeNs end);

// The processes' CPU per measured iteration (ms) over the span `pace` was measured on
// (ProcessCpuOver divided by `measured_iterations`); NaN when the pace is not ok, no iteration
// was measured, or the events hold no counter. What validate reads for a live run and for the
// simulated one alike.
double CpuMsPerIteration(const std::vector<TraceRecord>& events, const Pace& pace,
                         int64_t measured_iterations);

}  // namespace poseidon::validation
