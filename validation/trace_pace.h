// validation/trace_pace.h: a run's iteration time read from its workers' traces, as the
// simulator reports it (core/pace.h defines it once; this file only finds the moments T(w, v)
// in the events validation/trace_reader.h returns).
//
//   const Pace p = IterationPaceFromTraces({ReadTraceFile("rank-1.json"), ...}, workers, warmup,
//                                          iterations, /*bsp=*/true);
//
// Every event is attributed to its actor by its lane (core::DecodeTraceThreadId). T(w, 0) is
// worker w's first "iteration 0"; T(w, v) is, under BSP, when w first held every update of
// clocks 0..v-1 in every layer (for each layer the first "synced" event at or past clock v-1: a
// version may jump over a clock; the latest of the layers), or, under SSP and ASP, or for a worker
// without sync points, its "iteration end v-1".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "validation/trace_reader.h"

namespace poseidon::validation {

// ok is false (and why says why) when some worker lacks an event the definition needs.
struct Pace {
  bool ok = false;
  std::string why;
  double mean_ms = 0, std_ms = 0;
  // The span of the job's time base the mean is taken over (core::IterationPace's).
  core::TimeNs begin_ns = 0, end_ns = 0;
};

Pace IterationPaceFromTraces(const std::vector<std::vector<TraceRecord>>& traces, int num_workers,
                             int64_t warmup, int64_t iterations, bool bsp);

}  // namespace poseidon::validation
